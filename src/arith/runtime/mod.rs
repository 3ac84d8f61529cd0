//! Deployment targets: named runtimes mapping a storage format (and a GPU generation) to one
//! [`ExecutionModel`], with the settings a certificate then depends on. The defaults and the
//! source of every setting are in docs/runtimes.md; the error terms in docs/soundness.md
//! "Runtimes beyond IEEE accumulation".

use std::fmt;

use crate::arith::execution::{
    ExecutionModel, Gpu, OperandConversion, OperandFormat, OperandRounding, TensorCores,
    TensorOperands,
};
use crate::arith::format::Format;

/// A runtime a model can be declared to be served on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// onnxruntime's CPU execution provider (x86-64 MLAS; ARM64 float16 accumulates in float16).
    OnnxruntimeCpu,
    /// onnxruntime's CUDA execution provider (TF32 on by default; float16 on tensor cores).
    OnnxruntimeCuda,
    /// TensorRT (TF32 on by default; float16 on tensor cores).
    Tensorrt,
    /// PyTorch on CUDA (TF32 off for matmul; float16 reduced-precision reduction on).
    PytorchCuda,
    /// TensorFlow (TF32 on by default on GPUs; flush-to-zero in its CPU thread pools).
    Tensorflow,
    /// OpenVINO's CPU plugin on AVX512_BF16/AMX CPUs (float32 models run with bfloat16 operands).
    OpenvinoCpu,
}

/// The names accepted in policies and on the command line.
pub const RUNTIME_NAMES: &str =
    "onnxruntime-cpu, onnxruntime-cuda, tensorrt, pytorch-cuda, tensorflow, openvino-cpu";

/// The names accepted for `gpu`.
pub const GPU_NAMES: &str = "v100, a100, h100, b200";

impl Runtime {
    /// Every runtime.
    pub const ALL: [Runtime; 6] = [
        Runtime::OnnxruntimeCpu,
        Runtime::OnnxruntimeCuda,
        Runtime::Tensorrt,
        Runtime::PytorchCuda,
        Runtime::Tensorflow,
        Runtime::OpenvinoCpu,
    ];

    /// The name as written in policies and reports.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::OnnxruntimeCpu => "onnxruntime-cpu",
            Runtime::OnnxruntimeCuda => "onnxruntime-cuda",
            Runtime::Tensorrt => "tensorrt",
            Runtime::PytorchCuda => "pytorch-cuda",
            Runtime::Tensorflow => "tensorflow",
            Runtime::OpenvinoCpu => "openvino-cpu",
        }
    }

    /// Parse a policy or command-line name.
    pub fn parse(text: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.name() == text)
    }

    fn on_gpu(self) -> bool {
        matches!(
            self,
            Runtime::OnnxruntimeCuda
                | Runtime::Tensorrt
                | Runtime::PytorchCuda
                | Runtime::Tensorflow
        )
    }

    /// Whether float32 GEMMs use TF32 unless the user turns it off.
    fn tf32_default(self) -> bool {
        matches!(
            self,
            Runtime::OnnxruntimeCuda | Runtime::Tensorrt | Runtime::Tensorflow
        )
    }

    /// How a user turns TF32 off in this runtime.
    fn tf32_off_setting(self) -> &'static str {
        match self {
            Runtime::OnnxruntimeCuda => {
                "CUDA provider option use_tf32=0 (or NVIDIA_TF32_OVERRIDE=0)"
            }
            Runtime::Tensorrt => "the TF32 builder flag cleared (or NVIDIA_TF32_OVERRIDE=0)",
            Runtime::PytorchCuda => "torch.backends.cuda.matmul.allow_tf32 = False (the default)",
            _ => "tf.config.experimental.enable_tensor_float_32_execution(False)",
        }
    }

    /// How a user forbids reduced-precision split-K reductions, if the runtime has a switch.
    fn reduction_off_setting(self) -> Option<&'static str> {
        match self {
            Runtime::PytorchCuda => Some(
                "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False \
                 (allow_bf16_reduced_precision_reduction for bfloat16)",
            ),
            Runtime::OnnxruntimeCuda => Some("ORT_CUDA_GEMM_OPTIONS=2"),
            _ => None,
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A declared runtime and the settings the user states they configured (`None`: the runtime's
/// default, or the most pessimistic known where the default is not established).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuntimeChoice {
    /// The runtime.
    pub runtime: Runtime,
    /// The GPU generation (`None`: every known generation is covered).
    pub gpu: Option<Gpu>,
    /// TF32 for float32 GEMMs on or off.
    pub tf32: Option<bool>,
    /// Split-K partial sums reduced in float16/bfloat16 (on) or float32 (off).
    pub reduced_precision_reduction: Option<bool>,
    /// How operands are converted to TF32 or bfloat16.
    pub operand_rounding: Option<OperandRounding>,
}

/// An execution model and the settings its certificate depends on, in words.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    /// The execution model the certificate covers.
    pub execution: ExecutionModel,
    /// Each a sentence naming a setting the certificate holds only with.
    pub depends_on: Vec<String>,
}

impl RuntimeChoice {
    /// Only `runtime`, every setting at its default.
    pub fn new(runtime: Runtime) -> RuntimeChoice {
        RuntimeChoice {
            runtime,
            gpu: None,
            tf32: None,
            reduced_precision_reduction: None,
            operand_rounding: None,
        }
    }

    /// The execution model of this runtime for `storage` (with the declared accumulation and
    /// flush-to-zero), or why it cannot be modelled soundly.
    pub fn deployment(
        &self,
        storage: Format,
        accumulate: Option<Format>,
        ftz: bool,
    ) -> Result<Deployment, String> {
        let r = self.runtime;
        self.check_settings_apply()?;
        let mut depends_on = Vec::new();
        let execution = match r {
            Runtime::OnnxruntimeCpu => {
                if storage != Format::Float32 && accumulate == Some(Format::Float32) {
                    depends_on.push(format!(
                        "holds only on x86-64: onnxruntime on ARM64 accumulates {storage} GEMMs in {storage} (leave accumulate unset to cover both)"
                    ));
                }
                ExecutionModel::deployed(storage, accumulate, ftz)?
            }
            Runtime::OpenvinoCpu => self.openvino(storage, accumulate, &mut depends_on)?,
            _ => self.gpu_model(storage, accumulate, ftz, &mut depends_on)?,
        };
        if let Some(g) = self.gpu {
            depends_on.push(format!(
                "holds only on {} tensor cores (gpu = \"{}\"); other generations are not covered",
                g.name().to_uppercase(),
                g.name()
            ));
        }
        Ok(Deployment {
            execution,
            depends_on,
        })
    }

    /// Refuse a setting the runtime does not have.
    fn check_settings_apply(&self) -> Result<(), String> {
        let r = self.runtime;
        if !r.on_gpu() {
            for (set, key) in [
                (self.gpu.is_some(), "gpu"),
                (self.tf32.is_some(), "tf32"),
                (
                    self.reduced_precision_reduction.is_some(),
                    "reduced_precision_reduction",
                ),
            ] {
                if set {
                    return Err(format!(
                        "{key} does not apply to runtime {r} (a CPU runtime)"
                    ));
                }
            }
        }
        if self.operand_rounding.is_some() && r == Runtime::OnnxruntimeCpu {
            return Err(format!(
                "operand_rounding does not apply to runtime {r}: it converts no operands"
            ));
        }
        if self.reduced_precision_reduction == Some(false) && r.reduction_off_setting().is_none() {
            return Err(format!(
                "reduced_precision_reduction = false: {r} documents no switch that forbids \
                 reduced-precision split-K reductions, so lipfp cannot assume it"
            ));
        }
        Ok(())
    }

    /// OpenVINO's CPU plugin on AVX512_BF16/AMX: float32 models run with both factors rounded
    /// to bfloat16 (to nearest even), float32 accumulation with denormals treated as zero and
    /// flushed, activations possibly stored in bfloat16.
    fn openvino(
        &self,
        storage: Format,
        accumulate: Option<Format>,
        depends_on: &mut Vec<String>,
    ) -> Result<ExecutionModel, String> {
        if storage != Format::Float32 || accumulate.is_some_and(|a| a != Format::Float32) {
            return Err(
                "openvino-cpu is modelled for float32 models (run in bfloat16 inference precision) \
                 with float32 accumulation only"
                    .into(),
            );
        }
        let rounding = self.operand_rounding.unwrap_or(OperandRounding::Nearest);
        if rounding == OperandRounding::Nearest {
            depends_on.push(
                "holds only if bfloat16 conversion rounds to nearest (vcvtneps2bf16, as oneDNN does)"
                    .into(),
            );
        }
        depends_on.push(
            "holds only on x86-64 CPUs; OpenVINO's ARM float16 execution is not modelled".into(),
        );
        let mut m = ExecutionModel::deployed(Format::Float32, Some(Format::Float32), true)?;
        m.operand = Some(OperandConversion {
            format: OperandFormat::Bfloat16,
            rounding,
        });
        m.output_rounding = Some(Format::Bfloat16);
        Ok(m)
    }

    /// A GPU runtime: float32 with TF32 (operands converted, tensor cores, float32 split-K) or
    /// IEEE; float16/bfloat16 on tensor cores with float32 accumulation and split-K reduced in
    /// the storage format (reduced precision) or float32.
    fn gpu_model(
        &self,
        storage: Format,
        accumulate: Option<Format>,
        ftz: bool,
        depends_on: &mut Vec<String>,
    ) -> Result<ExecutionModel, String> {
        let r = self.runtime;
        // TensorFlow's CPU thread pools flush subnormals: cover them too
        let ftz = ftz || r == Runtime::Tensorflow;
        match storage {
            Format::Float64 => Err(format!(
                "{r}: float64 GEMMs on GPUs are not modelled; certify for onnxruntime-cpu or another format"
            )),
            Format::Float32 => {
                let tf32 = self.tf32.unwrap_or(r.tf32_default());
                let exists = self.gpu.is_none_or(|g| g != Gpu::V100);
                if !tf32 {
                    depends_on.push(format!(
                        "holds only with TF32 off: {}",
                        r.tf32_off_setting()
                    ));
                }
                if !(tf32 && exists) {
                    if self.operand_rounding.is_some() {
                        return Err("operand_rounding applies only with tf32 on".into());
                    }
                    // cuBLAS SGEMM without TF32: FMA dot products, split-K in float32: an IEEE
                    // float32 sum in some order, the bias in the epilogue
                    return ExecutionModel::deployed(storage, accumulate, ftz);
                }
                if accumulate.is_some_and(|a| a != Format::Float32) {
                    return Err(format!(
                        "{r}: TF32 GEMMs accumulate in float32; accumulate = \"{}\" cannot be modelled",
                        accumulate.map_or("", |a| a.name())
                    ));
                }
                let rounding = self.operand_rounding.unwrap_or(OperandRounding::Truncate);
                if rounding == OperandRounding::Nearest {
                    depends_on.push(
                        "holds only if the runtime rounds float32 operands to TF32 to nearest (operand_rounding = \"nearest\")"
                            .into(),
                    );
                }
                let mut m = ExecutionModel::deployed(storage, Some(Format::Float32), ftz)?;
                m.operand = Some(OperandConversion {
                    format: OperandFormat::Tf32,
                    rounding,
                });
                m.tensor_cores = Some(TensorCores {
                    gpu: self.gpu,
                    operands: TensorOperands::Tf32,
                });
                m.split_k = Some(Format::Float32);
                Ok(m)
            }
            Format::Float16 | Format::Bfloat16 => {
                if accumulate.is_some_and(|a| a != Format::Float32) {
                    return Err(format!(
                        "{r}: tensor-core accumulation in {storage} is not modelled; declare accumulate = \"float32\" (the runtime's default compute type) or leave it unset"
                    ));
                }
                let reduced = self.reduced_precision_reduction.unwrap_or(true);
                if !reduced {
                    depends_on.push(format!(
                        "holds only with reduced-precision split-K reductions off: {}",
                        r.reduction_off_setting().unwrap_or("")
                    ));
                }
                let mut m = ExecutionModel::deployed(storage, Some(Format::Float32), ftz)?;
                m.tensor_cores = Some(TensorCores {
                    gpu: self.gpu,
                    operands: TensorOperands::Half,
                });
                m.split_k = Some(if reduced { storage } else { Format::Float32 });
                Ok(m)
            }
        }
    }
}

/// The runtime keys as written in a policy table or on the command line (`where_` names the
/// place for messages, e.g. `[model]` or `--`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RuntimeKeys<'a> {
    /// `runtime`.
    pub runtime: Option<&'a str>,
    /// `gpu`.
    pub gpu: Option<&'a str>,
    /// `tf32`.
    pub tf32: Option<bool>,
    /// `reduced_precision_reduction`.
    pub reduced_precision_reduction: Option<bool>,
    /// `operand_rounding`.
    pub operand_rounding: Option<&'a str>,
}

impl<'a> RuntimeKeys<'a> {
    /// Each key of `self` over the one of `outer` (a gate's keys over `[model]`'s).
    pub fn over(self, outer: RuntimeKeys<'a>) -> RuntimeKeys<'a> {
        RuntimeKeys {
            runtime: self.runtime.or(outer.runtime),
            gpu: self.gpu.or(outer.gpu),
            tf32: self.tf32.or(outer.tf32),
            reduced_precision_reduction: self
                .reduced_precision_reduction
                .or(outer.reduced_precision_reduction),
            operand_rounding: self.operand_rounding.or(outer.operand_rounding),
        }
    }

    /// The declared runtime, or `None`; an error names the key at fault (`key: message`).
    pub fn choice(self) -> Result<Option<RuntimeChoice>, String> {
        let Some(name) = self.runtime else {
            let stray = [
                (self.gpu.is_some(), "gpu"),
                (self.tf32.is_some(), "tf32"),
                (
                    self.reduced_precision_reduction.is_some(),
                    "reduced_precision_reduction",
                ),
                (self.operand_rounding.is_some(), "operand_rounding"),
            ];
            return match stray.iter().find(|(set, _)| *set) {
                Some((_, key)) => Err(format!(
                    "{key}: set only with a runtime (runtime = one of {RUNTIME_NAMES})"
                )),
                None => Ok(None),
            };
        };
        let runtime = Runtime::parse(name)
            .ok_or_else(|| format!("runtime: `{name}` is not one of {RUNTIME_NAMES}"))?;
        let gpu = self
            .gpu
            .map(|g| Gpu::parse(g).ok_or_else(|| format!("gpu: `{g}` is not one of {GPU_NAMES}")))
            .transpose()?;
        let operand_rounding = self
            .operand_rounding
            .map(|r| match r {
                "nearest" => Ok(OperandRounding::Nearest),
                "truncate" => Ok(OperandRounding::Truncate),
                other => Err(format!(
                    "operand_rounding: `{other}` is not one of nearest, truncate"
                )),
            })
            .transpose()?;
        Ok(Some(RuntimeChoice {
            runtime,
            gpu,
            tf32: self.tf32,
            reduced_precision_reduction: self.reduced_precision_reduction,
            operand_rounding,
        }))
    }
}

/// The command-line flags that declare a runtime (`lipfp certify`, `lipfp inspect`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RuntimeFlags {
    /// The runtime the model is served on, a named preset of its arithmetic
    /// (docs/runtimes.md): onnxruntime-cpu, onnxruntime-cuda, tensorrt, pytorch-cuda,
    /// tensorflow, openvino-cpu (default: IEEE execution only, see the report's note).
    #[arg(long)]
    pub runtime: Option<String>,
    /// GPU generation for a GPU runtime: v100, a100, h100, b200 (default: every one covered).
    #[arg(long)]
    pub gpu: Option<String>,
    /// TF32 for float32 GEMMs, as configured in the runtime: on or off (default: the
    /// runtime's default).
    #[arg(long, value_parser = parse_on_off)]
    pub tf32: Option<bool>,
    /// Reduced-precision (float16/bfloat16) split-K reductions: on or off (default: on).
    #[arg(long, value_parser = parse_on_off)]
    pub reduced_precision_reduction: Option<bool>,
    /// How operands are rounded to TF32/bfloat16: nearest or truncate (default: truncate for
    /// TF32, which covers both; nearest for openvino-cpu's bfloat16).
    #[arg(long)]
    pub operand_rounding: Option<String>,
}

fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        other => Err(format!("`{other}`: write on or off")),
    }
}

impl RuntimeFlags {
    /// The flags as keys.
    pub fn keys(&self) -> RuntimeKeys<'_> {
        RuntimeKeys {
            runtime: self.runtime.as_deref(),
            gpu: self.gpu.as_deref(),
            tf32: self.tf32,
            reduced_precision_reduction: self.reduced_precision_reduction,
            operand_rounding: self.operand_rounding.as_deref(),
        }
    }
}

/// The note every report carries when no runtime is declared: what today's IEEE model covers
/// and what it does not.
pub fn default_coverage_note(storage: Format) -> String {
    format!(
        "no runtime declared: the certificate covers IEEE round-to-nearest executions in {storage} \
         (onnxruntime-cpu; pytorch-cuda float32 with TF32 off) and NOT GPU tensor cores (TF32, the \
         default of onnxruntime-cuda, tensorrt and tensorflow; float16/bfloat16 GEMMs), \
         reduced-precision split-K or openvino-cpu's bfloat16 execution: declare runtime = \"...\" \
         ({RUNTIME_NAMES}) to certify for one of them (docs/runtimes.md)"
    )
}

#[cfg(test)]
mod tests;
