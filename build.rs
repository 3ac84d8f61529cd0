//! Compile `proto/` with protox (pure Rust, no system `protoc`) and generate prost types.

fn main() {
    println!("cargo:rerun-if-changed=proto/lipfp.proto");
    let fds =
        protox::compile(["proto/lipfp.proto"], ["proto"]).expect("proto/lipfp.proto compiles");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost code generation");
}
