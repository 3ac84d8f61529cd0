//! The execution model a certificate covers: how a runtime may compute each dense layer
//! (DESIGN.md "What is certified"; argued in docs/soundness.md "The execution model").
//!
//! A layer's `n` products and its bias are summed in an *accumulation format*, in any order and
//! association, with or without FMA, the bias at any position (pre-loaded into the output as
//! BLAS/MLAS/`addmm` kernels do, among the products, or added last as in the paper's
//! `fl(fl(W z) + b)`); when the accumulation format is wider than the *storage format*, the
//! output is rounded once to the storage format; narrowing `Cast` nodes of the graph round it
//! again; then the activation.

use std::fmt;

use crate::format::Format;

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
        })
    }

    /// lipfp's float64 reference execution of the converted network (no casts, no flushing).
    pub fn float64_reference() -> ExecutionModel {
        ExecutionModel {
            storage: Format::Float64,
            accumulate: None,
            ftz: false,
            executes_casts: false,
        }
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

    /// The largest smallest-normal `lambda` of the formats involved: the flush-to-zero base case
    /// `D_0 = lambda sqrt(n_1)` must cover a flushed input in any of them.
    pub fn largest_lambda(&self) -> f64 {
        self.accumulations()
            .into_iter()
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
