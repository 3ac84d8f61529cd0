//! The execution model a certificate covers: how a runtime may compute each dense layer
//! (DESIGN.md "What is certified"; argued in docs/soundness.md "The execution model").
//!
//! A layer's `n` products and its bias are summed in an *accumulation format*, in any order and
//! association, with or without FMA, the bias at any position (pre-loaded into the output as
//! BLAS/MLAS/`addmm` kernels do, among the products, or added last as in the paper's
//! `fl(fl(W z) + b)`); when the accumulation format is wider than the *storage format*, the
//! output is rounded once to the storage format; narrowing `Cast` nodes of the graph round it
//! again; then the activation.
//!
//! Runtimes that leave this IEEE model (docs/runtimes.md) add, per layer: operand conversion
//! (both factors of every product rounded to TF32 or bfloat16 first), tensor-core block FMA
//! accumulation ([`BlockFma`]), split-K partial sums reduced in a stated format, and a possible
//! extra rounding of layer outputs. Each is argued in docs/soundness.md "Runtimes beyond IEEE
//! accumulation"; a certificate then covers both these executions and the IEEE ones on the
//! converted operands (so lipfp's own centre execution, [`crate::engine::exec`], stays covered).

use std::fmt;

use crate::arith::format::Format;

/// A format both factors of every product are rounded to before the multiplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperandFormat {
    /// NVIDIA TensorFloat-32: binary32's exponent range, an 11-bit significand.
    Tf32,
    /// bfloat16 (binary32's exponent range, an 8-bit significand).
    Bfloat16,
}

impl OperandFormat {
    /// Significand precision `p` in bits (including the implicit bit).
    pub fn precision(self) -> u32 {
        match self {
            OperandFormat::Tf32 => 11,
            OperandFormat::Bfloat16 => 8,
        }
    }

    /// Exponent of the smallest positive normal number (both formats: binary32's).
    pub fn emin(self) -> i32 {
        -126
    }

    /// The largest finite value, `(2 - 2^(1-p)) 2^127`.
    pub fn f_max(self) -> f64 {
        (2.0 - crate::arith::format::pow2(1 - self.precision() as i32))
            * crate::arith::format::pow2(127)
    }

    /// The name as written in policies and reports.
    pub fn name(self) -> &'static str {
        match self {
            OperandFormat::Tf32 => "tf32",
            OperandFormat::Bfloat16 => "bfloat16",
        }
    }
}

/// How a runtime rounds an operand into its [`OperandFormat`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperandRounding {
    /// Round to nearest (ties to even or away): relative error at most `2^-p`.
    Nearest,
    /// Truncation towards zero, or any conversion within `2^(1-p)` relative: covers nearest too.
    Truncate,
}

/// Operand conversion: every weight and every layer input rounded to `format` by `rounding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OperandConversion {
    /// The operand format.
    pub format: OperandFormat,
    /// The rounding assumed (truncation covers every rounding within one unit in the last place).
    pub rounding: OperandRounding,
}

impl OperandConversion {
    /// The binary exponent of the relative error bound: `-p` (nearest) or `1 - p` (truncation).
    pub fn relative_error_exponent(self) -> i32 {
        let p = self.format.precision() as i32;
        match self.rounding {
            OperandRounding::Nearest => -p,
            OperandRounding::Truncate => 1 - p,
        }
    }

    /// Convert a binary32 value as lipfp's centre execution does: truncation clears the low
    /// `24 - p` significand bits; nearest rounds to nearest, ties to even (the result is one of
    /// the conversions the bound covers; a value that rounds past the format's largest finite
    /// value becomes infinite, as the hardware's would).
    pub fn convert_f32(self, x: f32) -> f32 {
        if !x.is_finite() {
            return x;
        }
        let drop = 24 - self.format.precision();
        let bits = x.to_bits();
        let mask = (1u32 << drop) - 1;
        match self.rounding {
            OperandRounding::Truncate => f32::from_bits(bits & !mask),
            OperandRounding::Nearest => {
                let half = 1u32 << (drop - 1);
                let lsb = (bits >> drop) & 1;
                // adding below the dropped bits carries into the exponent correctly (to infinity
                // past the largest finite value)
                let rounded = bits.wrapping_add(half - 1 + lsb) & !mask;
                f32::from_bits(rounded)
            }
        }
    }
}

/// NVIDIA GPU generations with published tensor-core models (Khattak & Mikaitis, "Accurate
/// models of NVIDIA tensor cores", arXiv 2512.07004).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gpu {
    /// Volta (float16 only).
    V100,
    /// Ampere.
    A100,
    /// Hopper.
    H100,
    /// Blackwell.
    B200,
}

impl Gpu {
    /// Every known generation.
    pub const ALL: [Gpu; 4] = [Gpu::V100, Gpu::A100, Gpu::H100, Gpu::B200];

    /// The name as written in policies and reports.
    pub fn name(self) -> &'static str {
        match self {
            Gpu::V100 => "v100",
            Gpu::A100 => "a100",
            Gpu::H100 => "h100",
            Gpu::B200 => "b200",
        }
    }

    /// Parse a policy or command-line name.
    pub fn parse(text: &str) -> Option<Gpu> {
        Gpu::ALL.into_iter().find(|g| g.name() == text)
    }

    /// The block FMA of this generation's tensor cores for products of `operands` (`None`: the
    /// generation has no such tensor-core instruction). Block size and extra alignment bits
    /// from the Khattak-Mikaitis models: V100 float16 (4, 0); A100 float16/bfloat16 (8, 1),
    /// TF32 (4, 1); H100 and B200 float16/bfloat16 (16, 2), TF32 (8, 2).
    pub fn block_fma(self, operands: TensorOperands) -> Option<BlockFma> {
        let (block, extra_bits) = match (self, operands) {
            (Gpu::V100, TensorOperands::Half) => (4, 0),
            (Gpu::V100, _) => return None,
            (Gpu::A100, TensorOperands::Tf32) => (4, 1),
            (Gpu::A100, _) => (8, 1),
            (Gpu::H100 | Gpu::B200, TensorOperands::Tf32) => (8, 2),
            (Gpu::H100 | Gpu::B200, _) => (16, 2),
        };
        Some(BlockFma { block, extra_bits })
    }
}

/// The operand type of a tensor-core product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorOperands {
    /// TF32 (float32 data).
    Tf32,
    /// float16 or bfloat16 data.
    Half,
}

/// One tensor-core block fused multiply-add: `block` exact products and the float32 accumulator
/// aligned to the largest exponent, the smaller terms truncated to `23 + extra_bits` fraction
/// bits below it, summed, and the float32 result truncated (docs/soundness.md "Tensor cores").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockFma {
    /// Products per block (`b`).
    pub block: u32,
    /// Extra alignment bits (`e`).
    pub extra_bits: u32,
}

/// Tensor-core accumulation of a layer on `gpu` (`None`: any known generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorCores {
    /// The GPU generation, or `None` for the most pessimistic of all known.
    pub gpu: Option<Gpu>,
    /// The operand type of the products.
    pub operands: TensorOperands,
}

impl TensorCores {
    /// The block FMAs covered: the named generation's, or every known generation's.
    pub fn blocks(self) -> Vec<(Gpu, BlockFma)> {
        let gpus: Vec<Gpu> = self.gpu.map_or(Gpu::ALL.to_vec(), |g| vec![g]);
        gpus.into_iter()
            .filter_map(|g| g.block_fma(self.operands).map(|b| (g, b)))
            .collect()
    }
}

/// How the deployed runtime executes every dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecutionModel {
    /// Format of weights, inputs and layer outputs.
    pub storage: Format,
    /// Declared accumulation format; `None` covers both the storage format and the next wider
    /// one ([`Format::next_wider`]), so the default is sound for runtimes of either kind.
    pub accumulate: Option<Format>,
    /// Flush-to-zero / denormals-are-zero execution.
    pub ftz: bool,
    /// Whether the graph's narrowing `Cast` nodes are executed (every deployed runtime), or not
    /// (lipfp's own float64 reference execution of the real network).
    pub executes_casts: bool,
    /// Operand conversion before every product (TF32 or bfloat16 fast paths), if any.
    pub operand: Option<OperandConversion>,
    /// Tensor-core block FMA accumulation in float32, covered besides IEEE accumulation.
    pub tensor_cores: Option<TensorCores>,
    /// Split-K: partial sums over any split of a layer's products, each rounded to this format
    /// and summed in it in any order (float32 partials; a narrower format = reduced-precision
    /// reduction).
    pub split_k: Option<Format>,
    /// Layer outputs may also be rounded to this format (a runtime that stores activations in
    /// its inference precision).
    pub output_rounding: Option<Format>,
}

impl ExecutionModel {
    /// The deployed execution: `storage` format, optionally a declared accumulation format
    /// (which must hold every storage value; naming the storage format itself is the default).
    pub fn deployed(
        storage: Format,
        accumulate: Option<Format>,
        ftz: bool,
    ) -> Result<ExecutionModel, String> {
        if let Some(a) = accumulate {
            if !a.contains(storage) {
                return Err(format!(
                    "accumulation in {a} cannot hold every {storage} value; accumulate in {storage} or a wider format"
                ));
            }
        }
        Ok(ExecutionModel {
            storage,
            accumulate: accumulate.filter(|&a| a != storage),
            ftz,
            executes_casts: true,
            operand: None,
            tensor_cores: None,
            split_k: None,
            output_rounding: None,
        })
    }

    /// lipfp's float64 reference execution of the converted network (no casts, no flushing).
    pub fn float64_reference() -> ExecutionModel {
        ExecutionModel {
            storage: Format::Float64,
            accumulate: None,
            ftz: false,
            executes_casts: false,
            operand: None,
            tensor_cores: None,
            split_k: None,
            output_rounding: None,
        }
    }

    /// Whether the model is the IEEE model alone (no operand conversion, tensor cores, split-K
    /// reduction or extra output rounding).
    pub fn is_ieee(&self) -> bool {
        self.operand.is_none()
            && self.tensor_cores.is_none()
            && self.split_k.is_none()
            && self.output_rounding.is_none()
    }

    /// Every accumulation format the certificate covers.
    pub fn accumulations(&self) -> Vec<Format> {
        match self.accumulate {
            Some(a) => vec![a],
            None => std::iter::once(self.storage)
                .chain(self.storage.next_wider())
                .collect(),
        }
    }

    /// The accumulation format of lipfp's own centre execution (one of [`Self::accumulations`]):
    /// float16 and bfloat16 layers run as a native float32 GEMM rounded once to the storage
    /// format, float32 and float64 natively.
    pub fn centre_accumulation(&self) -> Format {
        self.accumulate.unwrap_or(match self.storage {
            Format::Float16 | Format::Bfloat16 => Format::Float32,
            f => f,
        })
    }

    /// The smallest-normal exponent of the tensor cores' input format (the operand format, or
    /// the storage format without conversion); `None` without tensor cores.
    pub fn tensor_input_emin(&self) -> Option<i32> {
        self.tensor_cores?;
        Some(
            self.operand
                .map_or(self.storage.emin(), |c| c.format.emin()),
        )
    }

    /// The largest smallest-normal `lambda` of the formats involved: the flush-to-zero base case
    /// `D_0 = lambda sqrt(n_1)` must cover a flushed input in any of them.
    pub fn largest_lambda(&self) -> f64 {
        self.accumulations()
            .into_iter()
            .chain(self.split_k)
            .chain(self.output_rounding)
            .map(Format::lambda)
            .fold(self.storage.lambda(), f64::max)
    }
}

impl fmt::Display for ExecutionModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let acc: Vec<&str> = self.accumulations().iter().map(|a| a.name()).collect();
        write!(
            f,
            "{} storage, {} accumulation, bias at any position of the sum, any order, FMA or not, {}",
            self.storage,
            acc.join(" or "),
            if self.ftz {
                "flush-to-zero"
            } else {
                "gradual underflow"
            }
        )?;
        if self.accumulations().iter().any(|&a| a != self.storage) {
            write!(f, ", one rounding to {} per layer output", self.storage)?;
        }
        if let Some(c) = self.operand {
            let how = match c.rounding {
                OperandRounding::Nearest => "to nearest",
                OperandRounding::Truncate => "by truncation or to nearest",
            };
            write!(f, ", operands rounded to {} {how}", c.format.name())?;
        }
        if let Some(tc) = self.tensor_cores {
            let blocks: Vec<String> = tc
                .blocks()
                .iter()
                .map(|(g, b)| format!("{} b={} e={}", g.name(), b.block, b.extra_bits))
                .collect();
            write!(
                f,
                ", or tensor-core block FMA with truncation ({})",
                blocks.join("; ")
            )?;
        }
        if let Some(r) = self.split_k {
            write!(f, ", split-K partial sums reduced in {r}")?;
        }
        if let Some(o) = self.output_rounding {
            write!(f, ", outputs possibly stored in {o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_ieee` holds for the IEEE model alone: any one extension makes it false.
    #[test]
    fn any_extension_leaves_the_ieee_model() {
        let base = ExecutionModel::deployed(Format::Float32, None, false).unwrap();
        assert!(base.is_ieee());
        let operand = Some(OperandConversion {
            format: OperandFormat::Tf32,
            rounding: OperandRounding::Truncate,
        });
        let tensor_cores = Some(TensorCores {
            gpu: None,
            operands: TensorOperands::Tf32,
        });
        let variants = [
            ExecutionModel { operand, ..base },
            ExecutionModel {
                tensor_cores,
                ..base
            },
            ExecutionModel {
                split_k: Some(Format::Float16),
                ..base
            },
            ExecutionModel {
                output_rounding: Some(Format::Bfloat16),
                ..base
            },
        ];
        for v in variants {
            assert!(!v.is_ieee(), "{v:?}");
        }
    }

    /// The centre execution's operand conversion, pinned on bit patterns worked out by hand:
    /// TF32 keeps 10 fraction bits, bfloat16 7; nearest rounds ties to even.
    #[test]
    fn operand_conversion_rounds_the_dropped_bits_as_documented() {
        let conv = |format, rounding| OperandConversion { format, rounding };
        let tf32_near = conv(OperandFormat::Tf32, OperandRounding::Nearest);
        let tf32_trunc = conv(OperandFormat::Tf32, OperandRounding::Truncate);
        let bf16_near = conv(OperandFormat::Bfloat16, OperandRounding::Nearest);
        let bf16_trunc = conv(OperandFormat::Bfloat16, OperandRounding::Truncate);
        let p = |e: i32| 2f32.powi(e);
        // representable: unchanged
        for c in [tf32_near, tf32_trunc] {
            assert_eq!(c.convert_f32(1.0 + p(-10)), 1.0 + p(-10));
            assert_eq!(c.convert_f32(-3.5), -3.5);
        }
        // halfway between 1 and 1 + 2^-10: ties to even (1); truncation: 1
        assert_eq!(tf32_near.convert_f32(1.0 + p(-11)), 1.0);
        assert_eq!(tf32_trunc.convert_f32(1.0 + p(-11)), 1.0);
        // halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): up to the even one
        assert_eq!(tf32_near.convert_f32(1.0 + 3.0 * p(-11)), 1.0 + p(-9));
        assert_eq!(tf32_trunc.convert_f32(1.0 + 3.0 * p(-11)), 1.0 + p(-10));
        // above halfway: up (nearest), down (truncation); signs are symmetric
        let x = 1.0 + p(-11) + p(-20);
        assert_eq!(tf32_near.convert_f32(x), 1.0 + p(-10));
        assert_eq!(tf32_trunc.convert_f32(x), 1.0);
        assert_eq!(tf32_near.convert_f32(-x), -(1.0 + p(-10)));
        assert_eq!(tf32_trunc.convert_f32(-x), -1.0);
        // bfloat16: 7 fraction bits
        let y = 1.0 + p(-8) + p(-20);
        assert_eq!(bf16_near.convert_f32(y), 1.0 + p(-7));
        assert_eq!(bf16_trunc.convert_f32(y), 1.0);
        assert_eq!(bf16_near.convert_f32(1.0 + p(-8)), 1.0);
        // past the largest finite value: infinity (nearest), the largest TF32 value (truncation)
        assert_eq!(tf32_near.convert_f32(f32::MAX), f32::INFINITY);
        assert_eq!(tf32_trunc.convert_f32(f32::MAX), (2.0 - p(-10)) * p(127));
        // non-finite values pass through
        assert_eq!(tf32_near.convert_f32(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert!(tf32_trunc.convert_f32(f32::NAN).is_nan());
        // subnormals keep their (fixed-point) top bits
        assert_eq!(
            tf32_trunc.convert_f32(f32::from_bits(0x0000_3fff)),
            f32::from_bits(0x0000_2000)
        );
    }

    #[test]
    fn default_covers_storage_and_the_wider_format() {
        let m = ExecutionModel::deployed(Format::Float16, None, false).unwrap();
        assert_eq!(m.accumulations(), vec![Format::Float16, Format::Float32]);
        assert_eq!(m.centre_accumulation(), Format::Float32);
        let same = ExecutionModel::deployed(Format::Float16, Some(Format::Float16), false).unwrap();
        assert_eq!(same, m);
        let f64m = ExecutionModel::deployed(Format::Float64, None, false).unwrap();
        assert_eq!(f64m.accumulations(), vec![Format::Float64]);
        assert_eq!(
            ExecutionModel::deployed(Format::Float32, None, false)
                .unwrap()
                .centre_accumulation(),
            Format::Float32
        );
    }

    #[test]
    fn declared_accumulation_must_hold_the_storage_values() {
        let wide = ExecutionModel::deployed(Format::Bfloat16, Some(Format::Float32), true).unwrap();
        assert_eq!(wide.accumulations(), vec![Format::Float32]);
        assert_eq!(wide.largest_lambda(), Format::Float32.lambda());
        let e =
            ExecutionModel::deployed(Format::Float32, Some(Format::Float16), false).unwrap_err();
        assert!(e.contains("cannot hold"), "{e}");
        assert!(ExecutionModel::deployed(Format::Float16, Some(Format::Bfloat16), false).is_err());
        let text = wide.to_string();
        assert!(text.contains("bias at any position") && text.contains("flush-to-zero"));
        assert!(text.contains("one rounding to bfloat16"), "{text}");
    }
}
