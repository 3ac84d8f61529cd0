//! Unit tests of the runtimes' execution models.

use super::*;

fn model(c: RuntimeChoice, storage: Format) -> Result<Deployment, String> {
    c.deployment(storage, None, false)
}

#[test]
fn keys_name_the_one_at_fault() {
    let k = RuntimeKeys {
        gpu: Some("h100"),
        ..Default::default()
    };
    assert!(k.choice().unwrap_err().starts_with("gpu:"));
    let bad = RuntimeKeys {
        runtime: Some("onnxruntime-gpu"),
        ..Default::default()
    };
    assert!(bad.choice().unwrap_err().starts_with("runtime:"));
    let gate = RuntimeKeys {
        gpu: Some("a100"),
        ..Default::default()
    };
    let model = RuntimeKeys {
        runtime: Some("tensorrt"),
        gpu: Some("h100"),
        operand_rounding: Some("nearest"),
        ..Default::default()
    };
    let c = gate.over(model).choice().unwrap().unwrap();
    assert_eq!(
        (c.runtime, c.gpu, c.operand_rounding),
        (
            Runtime::Tensorrt,
            Some(Gpu::A100),
            Some(OperandRounding::Nearest)
        )
    );
    assert_eq!(RuntimeKeys::default().choice(), Ok(None));
    assert_eq!(parse_on_off("off"), Ok(false));
    assert!(parse_on_off("no").is_err());
}

#[test]
fn names_round_trip() {
    for r in Runtime::ALL {
        assert_eq!(Runtime::parse(r.name()), Some(r));
        assert!(RUNTIME_NAMES.contains(r.name()));
    }
    assert_eq!(Runtime::parse("cuda"), None);
    for g in Gpu::ALL {
        assert_eq!(Gpu::parse(g.name()), Some(g));
    }
}

#[test]
fn onnxruntime_cpu_is_the_ieee_model() {
    let d = model(RuntimeChoice::new(Runtime::OnnxruntimeCpu), Format::Float32).unwrap();
    assert_eq!(
        d.execution,
        ExecutionModel::deployed(Format::Float32, None, false).unwrap()
    );
    assert!(d.depends_on.is_empty());
    let arm = RuntimeChoice::new(Runtime::OnnxruntimeCpu)
        .deployment(Format::Float16, Some(Format::Float32), false)
        .unwrap();
    assert!(arm.depends_on[0].contains("ARM64"), "{:?}", arm.depends_on);
}

#[test]
fn tf32_runtimes_convert_operands_and_use_tensor_cores() {
    for r in [
        Runtime::OnnxruntimeCuda,
        Runtime::Tensorrt,
        Runtime::Tensorflow,
    ] {
        let d = model(RuntimeChoice::new(r), Format::Float32).unwrap();
        let m = d.execution;
        assert_eq!(m.operand.map(|c| c.format), Some(OperandFormat::Tf32));
        assert_eq!(
            m.operand.map(|c| c.rounding),
            Some(OperandRounding::Truncate)
        );
        assert_eq!(m.split_k, Some(Format::Float32));
        assert_eq!(m.tensor_cores.map(|t| t.gpu), Some(None));
        assert_eq!(m.ftz, r == Runtime::Tensorflow);
    }
    // PyTorch: TF32 off by default: the IEEE model
    let p = model(RuntimeChoice::new(Runtime::PytorchCuda), Format::Float32).unwrap();
    assert!(p.execution.is_ieee());
    // turning TF32 off is a dependency of the certificate
    let off = RuntimeChoice {
        tf32: Some(false),
        ..RuntimeChoice::new(Runtime::OnnxruntimeCuda)
    };
    let d = model(off, Format::Float32).unwrap();
    assert!(d.execution.is_ieee());
    assert!(d.depends_on[0].contains("use_tf32=0"), "{:?}", d.depends_on);
}

#[test]
fn half_precision_on_gpus_reduces_split_k_in_storage_unless_turned_off() {
    let d = model(RuntimeChoice::new(Runtime::PytorchCuda), Format::Float16).unwrap();
    assert_eq!(d.execution.split_k, Some(Format::Float16));
    assert_eq!(d.execution.accumulate, Some(Format::Float32));
    let off = RuntimeChoice {
        reduced_precision_reduction: Some(false),
        gpu: Some(Gpu::H100),
        ..RuntimeChoice::new(Runtime::PytorchCuda)
    };
    let d = model(off, Format::Float16).unwrap();
    assert_eq!(d.execution.split_k, Some(Format::Float32));
    assert_eq!(d.depends_on.len(), 2, "{:?}", d.depends_on);
    assert!(d.execution.to_string().contains("h100 b=16 e=2"));
}

#[test]
fn what_cannot_be_modelled_is_refused() {
    let cuda = RuntimeChoice::new(Runtime::OnnxruntimeCuda);
    assert!(model(cuda, Format::Float64)
        .unwrap_err()
        .contains("float64"));
    let e = cuda
        .deployment(Format::Float16, Some(Format::Float16), false)
        .unwrap_err();
    assert!(e.contains("not modelled"), "{e}");
    let trt = RuntimeChoice {
        reduced_precision_reduction: Some(false),
        ..RuntimeChoice::new(Runtime::Tensorrt)
    };
    assert!(model(trt, Format::Float16)
        .unwrap_err()
        .contains("no switch"));
    let cpu_gpu = RuntimeChoice {
        gpu: Some(Gpu::A100),
        ..RuntimeChoice::new(Runtime::OnnxruntimeCpu)
    };
    assert!(model(cpu_gpu, Format::Float32).unwrap_err().contains("gpu"));
    assert!(model(RuntimeChoice::new(Runtime::OpenvinoCpu), Format::Float16).is_err());
    let ov = model(RuntimeChoice::new(Runtime::OpenvinoCpu), Format::Float32).unwrap();
    assert!(ov.execution.ftz && ov.execution.output_rounding == Some(Format::Bfloat16));
}
