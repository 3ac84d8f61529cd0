//! Which rows a subdomain's slope search improves and where it starts ([`RowSearch`]): the rows
//! whose bound is at most the search's target, of rows that stand in for one another
//! ([`RowGroups`]) only the best, started from a parent's multipliers ([`Warm`]); and the sound
//! bounds at what it found.

use ndarray::Array2;

use super::backward;
use super::hidden::HiddenBounds;
use super::local_net::{LocalNet, SlopeSearch};
use super::region::Region;
use super::slopes::{self, Multipliers};
use super::split::Splits;
use crate::arith::sound::add_down;

/// Rows any one of which does the work of all (a disjunct's rows: one positive bound, after its
/// offset, excludes it): per row of `C`, its group and its offset. A slope search given groups
/// improves only the row of each group whose CROWN bound plus offset is highest.
#[derive(Clone, Copy, Debug)]
pub struct RowGroups<'a> {
    /// Per row, its group.
    pub group: &'a [usize],
    /// Per row, what is added to its bound (rounded down) before it is compared.
    pub offset: &'a [f64],
}

/// A search's starting point: the rows of `C` multipliers were found for (a parent's, for the
/// same rows), and them.
pub type Warm<'a> = (&'a [usize], &'a Multipliers);

/// The rows a slope search improves (those whose sound bound is at most its target, of each
/// group the best) and where it starts.
pub(super) struct RowSearch {
    search: SlopeSearch,
    rows: Vec<usize>,
    c: Array2<f64>,
    start: Vec<f64>,
    from: Option<Multipliers>,
}

impl RowSearch {
    /// The rows of `c` to search given their sound bounds `lower` (`None`: none, or no steps),
    /// started from `warm` when it has every one of them.
    pub(super) fn new(
        (search, warm, groups): (SlopeSearch, Option<Warm<'_>>, Option<RowGroups<'_>>),
        c: &Array2<f64>,
        lower: &[f64],
    ) -> Option<RowSearch> {
        let mut rows: Vec<usize> = (0..c.nrows())
            .filter(|&r| lower[r].partial_cmp(&search.target) != Some(std::cmp::Ordering::Greater))
            .collect();
        if let Some(g) = groups {
            rows = best_of_each_group(&rows, g, lower);
        }
        if rows.is_empty() || search.iterations == 0 {
            return None;
        }
        let from = warm.and_then(|(at, m)| {
            let picks: Option<Vec<usize>> = (rows.iter())
                .map(|r| at.iter().position(|a| a == r))
                .collect();
            picks.map(|p| m.select_rows(&p))
        });
        Some(RowSearch {
            search,
            c: c.select(ndarray::Axis(0), &rows),
            start: rows.iter().map(|&r| lower[r]).collect(),
            from,
            rows,
        })
    }

    /// The search over `region` with `hidden`'s relaxations.
    pub(super) fn problem<'a>(
        &'a self,
        hidden: &'a HiddenBounds,
        region: &'a Region,
        splits: &'a Splits,
    ) -> slopes::Problem<'a> {
        slopes::Problem {
            relax: &hidden.relax,
            c: &self.c,
            x0: region.centre.view(),
            reach: match &region.boxed {
                Some(b) => slopes::Reach::Box(&b.half),
                None => slopes::Reach::Ball(region.eps),
            },
            start: &self.start,
            target: self.search.target,
            iterations: self.search.iterations,
            splits,
            from: self.from.as_ref(),
        }
    }
}

impl LocalNet<'_> {
    /// For the rows of `c` whose bound in `lower` is at most the search's target, searches lower
    /// slopes and the split constraints' multipliers ([`slopes::search_many`], from `warm`'s rows
    /// where given) and keeps, per row, the larger of the two sound bounds. Returns what it found
    /// when it searched every row.
    pub(super) fn search_slopes(
        &self,
        (search, warm): (SlopeSearch, Option<Warm<'_>>),
        c: &Array2<f64>,
        lower: &mut [f64],
        (hidden, region, splits): (&HiddenBounds, &Region, &Splits),
    ) -> Option<Multipliers> {
        let rs = RowSearch::new((search, warm, None), c, lower)?;
        let problem = rs.problem(hidden, region, splits);
        let found = slopes::search_many(self, std::slice::from_ref(&problem));
        let found = found.into_iter().next().flatten()?;
        let (rows, found) = self.keep_better(&rs, found, lower, (hidden, region, splits));
        (rows.len() == lower.len()).then_some(found)
    }

    /// The sound bounds of the searched rows at the slopes and multipliers `found`: each row
    /// keeps the larger of its two sound bounds in `lower`. Returns the rows searched and
    /// `found`.
    pub(super) fn keep_better(
        &self,
        rs: &RowSearch,
        found: Multipliers,
        lower: &mut [f64],
        (hidden, region, splits): (&HiddenBounds, &Region, &Splits),
    ) -> (Vec<usize>, Multipliers) {
        // the rows are over the layer above the last relaxed one (the output, or a hidden
        // layer's pre-activations when its own bounds are tightened)
        let top = hidden.relax.len();
        let parts = (&hidden.pre[..], &hidden.relax[..], &hidden.errors[..]);
        let shift = (!splits.is_empty()).then_some((&found.betas[..], splits));
        let lines = (Some(&found.slopes[..]), true, shift);
        let better = backward::lower_bounds(self, top, rs.c.clone(), parts, lines, region, None);
        for (&r, b) in rs.rows.iter().zip(better) {
            // NaN compares false: a failed search keeps CROWN's bound
            if b > lower[r] {
                lower[r] = b;
            }
        }
        (rs.rows.clone(), found)
    }
}

/// A row's rank among its group's: its bound `lower` plus its `offset`, rounded down; `-inf`
/// where that is NaN or `-inf` (a row that excludes nothing has the offset `-inf`).
pub fn group_rank(lower: f64, offset: f64) -> f64 {
    let v = add_down(lower, offset);
    if v.is_nan() {
        f64::NEG_INFINITY
    } else {
        v
    }
}

/// Of `rows` (ascending), the one of each group of `groups` of highest [`group_rank`], the
/// first of equals; a row ranked `-inf` is never chosen (its search could exclude nothing, and
/// a start that is not finite stops the search). Ascending.
fn best_of_each_group(rows: &[usize], groups: RowGroups<'_>, lower: &[f64]) -> Vec<usize> {
    let value = |r: usize| group_rank(lower[r], groups.offset.get(r).copied().unwrap_or(f64::NAN));
    let mut best: Vec<(usize, usize)> = Vec::new();
    for &r in rows.iter().filter(|&&r| value(r) > f64::NEG_INFINITY) {
        let g = groups.group.get(r).copied().unwrap_or(usize::MAX - r);
        match best.iter_mut().find(|(h, _)| *h == g) {
            Some((_, b)) if value(r) > value(*b) => *b = r,
            Some(_) => {}
            None => best.push((g, r)),
        }
    }
    let mut out: Vec<usize> = best.into_iter().map(|(_, r)| r).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of each group the row whose bound plus offset is highest (the first of equals; NaN
    /// lowest), in ascending order.
    #[test]
    fn a_search_takes_the_best_row_of_each_group() {
        let group = [0, 0, 1, 0, 1, 2];
        let offset = [0.0, 1.0, 0.0, 0.0, f64::NEG_INFINITY, f64::NAN];
        let groups = RowGroups {
            group: &group,
            offset: &offset,
        };
        let lower = [-1.0, -1.5, -3.0, -0.75, 5.0, 9.0];
        // group 0: -1.0, -0.5, -0.75; group 1: -3.0 and -inf; group 2: NaN alone, none
        let all = [0, 1, 2, 3, 4, 5];
        assert_eq!(best_of_each_group(&all, groups, &lower), vec![1, 2]);
        // only the rows given are ranked, and none ranked -inf
        assert_eq!(best_of_each_group(&[0, 3, 4], groups, &lower), vec![3]);
        let unbounded = [f64::NEG_INFINITY, -1.5, -3.0, -0.75, 5.0, 9.0];
        assert_eq!(
            best_of_each_group(&[0, 4], groups, &unbounded),
            Vec::<usize>::new()
        );
        assert_eq!(group_rank(1.0, f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert_eq!(
            group_rank(f64::INFINITY, f64::NEG_INFINITY),
            f64::NEG_INFINITY
        );
        // rounded down, a step below even an exact sum
        assert_eq!(group_rank(0.5, 0.25), 0.75f64.next_down());
        // equals: the first
        let tied = [-1.0, -2.0, 0.0, -1.0, 0.0, 0.0];
        assert_eq!(best_of_each_group(&[0, 1, 3], groups, &tied), vec![0]);
    }

    /// Warm only when the parent searched every row chosen; its rows mapped to the chosen ones.
    #[test]
    fn a_search_starts_warm_from_the_rows_its_parent_searched() {
        let search = SlopeSearch {
            iterations: 3,
            target: f64::INFINITY,
        };
        let c = ndarray::arr2(&[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]);
        let found = Multipliers {
            slopes: vec![ndarray::arr2(&[[0.25, 0.5], [0.75, 1.0]])],
            betas: vec![ndarray::Array2::zeros((2, 2))],
        };
        let group = [0, 0, 0];
        let offset = [0.0; 3];
        let groups = Some(RowGroups {
            group: &group,
            offset: &offset,
        });
        // the parent searched rows 2 and 0 (in that order); the best row now is 0
        let warm = Some((&[2, 0][..], &found));
        let rs = RowSearch::new((search, warm, groups), &c, &[0.5, -1.0, 0.25]).unwrap();
        assert_eq!(rs.rows, vec![0]);
        assert_eq!(rs.from.unwrap().slopes[0], ndarray::arr2(&[[0.75, 1.0]]));
        // the best row is 1, which the parent did not search: a cold start
        let rs = RowSearch::new((search, warm, groups), &c, &[-2.0, 1.0, 0.25]).unwrap();
        assert_eq!((rs.rows.clone(), rs.from.is_none()), (vec![1], true));
        // without groups every row, and the parent lacks row 1: cold
        let rs = RowSearch::new((search, warm, None), &c, &[0.5, -1.0, 0.25]).unwrap();
        assert_eq!((rs.rows.clone(), rs.from.is_none()), (vec![0, 1, 2], true));
        // no steps: no search
        let idle = SlopeSearch {
            iterations: 0,
            ..search
        };
        assert!(RowSearch::new((idle, warm, None), &c, &[0.0; 3]).is_none());
    }
}
