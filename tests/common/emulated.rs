//! The emulated executions of each runtime (`tests/conformance/emulate_bundle.py`, the
//! `tensor_core.py` emulators), as the lists of keyword arguments the script takes: shared by
//! `tests/oracles/runtime_conformance.rs` and `tests/oracles/shapes.rs`.

#![allow(dead_code)]

use lipfp::arith::execution::Gpu;
use lipfp::arith::format::Format;
use serde_json::{json, Value};

/// TF32 GEMM executions on `gpus`: both conversion roundings, the bias first or in the
/// epilogue, with and without a float32 split-K, and the IEEE GEMM of converted operands.
pub fn tf32_executions(gpus: &[Gpu], ftz: bool) -> Vec<Value> {
    let mut v = Vec::new();
    for g in gpus {
        for rounding in ["trunc", "nearest"] {
            for bias in ["first", "epilogue"] {
                v.push(json!({"name": format!("{} tf32 {rounding} bias {bias}", g.name()), "kind": "gemm",
                    "operand": "tf32", "operand_rounding": rounding, "device": g.name(),
                    "accumulation": "tensor_core", "bias_position": bias, "ftz": ftz}));
            }
        }
        v.push(json!({"name": format!("{} tf32 split-K 7", g.name()), "kind": "gemm", "operand": "tf32",
            "operand_rounding": "trunc", "device": g.name(), "accumulation": "tensor_core",
            "bias_position": "epilogue", "split_k": 7, "reduction": "float32", "ftz": ftz}));
    }
    v.push(json!({"name": "ieee on tf32 operands", "kind": "gemm", "operand": "tf32",
        "operand_rounding": "nearest", "accumulation": "ieee", "bias_position": "epilogue", "ftz": ftz}));
    v.push(json!({"name": "tf32 off", "kind": "gemm", "accumulation": "ieee", "bias_position": "first", "ftz": ftz}));
    v
}

/// float16/bfloat16 tensor-core executions on `gpu`, with split-K partials reduced in `red`.
pub fn half_executions(gpu: Gpu, storage: Format, red: Format) -> Vec<Value> {
    let mut v = Vec::new();
    for split in [None, Some(2), Some(7), Some(33)] {
        for bias in ["first", "epilogue"] {
            v.push(json!({"name": format!("{} split {split:?} bias {bias}", gpu.name()), "kind": "gemm",
                "device": gpu.name(), "accumulation": "tensor_core", "bias_position": bias,
                "split_k": split, "reduction": red.name(), "out": storage.name()}));
        }
    }
    v.push(
        json!({"name": "ieee float32 then one rounding", "kind": "gemm", "accumulation": "ieee",
        "bias_position": "epilogue", "out": storage.name()}),
    );
    v
}

/// OpenVINO's bfloat16 dot products (both kernels, bias first or in the epilogue).
pub fn openvino_executions() -> Vec<Value> {
    ["avx512", "amx"]
        .iter()
        .flat_map(|k| {
            ["first", "epilogue"].map(|b| {
                json!({"name": format!("{k} bias {b}"), "kind": "openvino", "kernel": k, "bias_position": b})
            })
        })
        .collect()
}
