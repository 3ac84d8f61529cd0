//! The product `Lambda W` of a few rows by a layer's matrix, as the bounds form it at every layer
//! of every backward pass. For fewer than [`FEW`] rows it runs over `W`'s rows, adding each,
//! scaled, into every row of the result that has a nonzero coefficient for it (the rows of the
//! result stay in cache, each row of `W` is read once), instead of a general matrix product that
//! copies `W` into its own layout on every call (most of the time of a small product), a block
//! of the result's columns at a time so that the block stays in cache. More rows take a general
//! product over the rows of `W` that some coefficient reads ([`read_rows_times`]: a unit
//! inactive over the subdomain gives every row a zero coefficient). Either way
//! each entry is a float64 sum of the `m` products `Lambda_rk W_kj` in some order (a zero
//! coefficient adds an exact zero, or is left out), which is all the rounding arguments assume
//! (docs/soundness.md "Local bounds": `gamma_m` bounds a sum of `m` products in any order, and
//! of fewer).

use ndarray::{Array2, ArrayView2, Axis};

/// Up to this many rows, [`rows_times`] runs row by row.
pub const FEW: usize = 64;

/// Columns of the result updated together: a block of every row of the result (at most
/// [`FEW`] rows of 256 float64, 128 KiB; 18 KiB for the nine rows of a VNN-COMP property) stays
/// in cache while every row of `W` adds into it.
const BLOCK: usize = 256;

/// `lam W` (`lam`: `r x m`, `w`: `m x n`).
pub fn rows_times(lam: &Array2<f64>, w: ArrayView2<'_, f64>) -> Array2<f64> {
    let (rows, m) = lam.dim();
    if w.nrows() != m {
        return lam.dot(&w);
    }
    if rows >= FEW {
        return read_rows_times(lam.view(), w);
    }
    let n = w.ncols();
    let mut out = Array2::<f64>::zeros((rows, n));
    let (Some(ws), Some(coef)) = (w.as_slice(), lam.as_slice()) else {
        for (k, wk) in w.rows().into_iter().enumerate() {
            for (r, mut o) in out.rows_mut().into_iter().enumerate() {
                let a = lam[[r, k]];
                if a != 0.0 {
                    o.scaled_add(a, &wk);
                }
            }
        }
        return out;
    };
    let Some(os) = out.as_slice_mut() else {
        unreachable!("a new array is in standard layout");
    };
    for j0 in (0..n).step_by(BLOCK) {
        let j1 = (j0 + BLOCK).min(n);
        for k in 0..m {
            let wk = &ws[k * n + j0..k * n + j1];
            for r in 0..rows {
                let a = coef[r * m + k];
                if a != 0.0 {
                    add_scaled(&mut os[r * n + j0..r * n + j1], a, wk);
                }
            }
        }
    }
    out
}

/// `lam W` as one general product over the rows `k` of `W` that some row of `lam` reads
/// (`Lambda_rk != 0`, NaN included); over every row when nearly all are read (selecting them
/// would copy `W` for little).
pub fn read_rows_times(lam: ArrayView2<'_, f64>, w: ArrayView2<'_, f64>) -> Array2<f64> {
    let m = lam.ncols();
    let mut reads = vec![false; m];
    for row in lam.rows() {
        for (r, v) in reads.iter_mut().zip(row) {
            *r |= *v != 0.0;
        }
    }
    let read: Vec<usize> = (0..m).filter(|&k| reads[k]).collect();
    if 10 * read.len() >= 9 * m || w.nrows() != m {
        return lam.dot(&w);
    }
    lam.select(Axis(1), &read).dot(&w.select(Axis(0), &read))
}

/// `o += a w`, element by element: each product rounded, then the sum (never fused, so every
/// entry is the float64 sum of rounded products that the rounding arguments bound). Compiled
/// for the widest vector unit the processor has (chosen once at run time); the elements are
/// independent, so every width gives the same bits.
#[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
fn add_scaled(o: &mut [f64], a: f64, w: &[f64]) {
    for (o, w) in o.iter_mut().zip(w) {
        *o += a * w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    /// Small integer entries: every sum is exact, so any order gives the general product's
    /// value; a NaN coefficient propagates, and many rows take the general product.
    #[test]
    fn a_few_rows_times_a_matrix_is_the_product() {
        let lam = array![[1.0, 0.0, -2.0], [0.5, 3.0, 0.0]];
        let w = array![[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]];
        assert_eq!(rows_times(&lam, w.view()), lam.dot(&w));
        assert_eq!(
            rows_times(&lam, w.view()),
            array![[-9.0, -10.0], [9.5, -11.0]]
        );
        let nan = array![[f64::NAN, 0.0, 0.0]];
        assert!(rows_times(&nan, w.view()).iter().all(|v| v.is_nan()));
        let many = Array2::from_shape_fn((FEW, 3), |(r, k)| (r + k) as f64);
        assert_eq!(rows_times(&many, w.view()), many.dot(&w));
        let few = Array2::from_shape_fn((FEW - 1, 3), |(r, k)| (r * k) as f64 - 2.0);
        assert_eq!(rows_times(&few, w.view()), few.dot(&w));
        // a transposed view is read the same way
        let wt = array![[1.0, 3.0, 5.0], [2.0, -4.0, 6.0]];
        assert_eq!(rows_times(&lam, wt.t()), lam.dot(&w));
        // many rows, most coefficients zero: the rows of W read are the product's
        let sparse = Array2::from_shape_fn((FEW, 3), |(r, k)| if k == 1 { r as f64 } else { 0.0 });
        assert_eq!(rows_times(&sparse, w.view()), sparse.dot(&w));
        let mut nan = sparse.clone();
        nan[[5, 2]] = f64::NAN;
        let product = rows_times(&nan, w.view());
        assert!(product.row(5).iter().all(|v| v.is_nan()));
        assert_eq!(product.row(4), sparse.dot(&w).row(4));
        let none = Array2::<f64>::zeros((2, 3));
        assert_eq!(
            read_rows_times(none.view(), w.view()),
            Array2::<f64>::zeros((2, 2))
        );
        // wider than a block of columns: every block is the product's
        let wide = Array2::from_shape_fn((3, 2 * BLOCK + 7), |(k, j)| (k * j % 11) as f64 - 5.0);
        assert_eq!(rows_times(&lam, wide.view()), lam.dot(&wide));
    }
}
