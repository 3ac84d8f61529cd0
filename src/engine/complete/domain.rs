//! Branch and bound's subdomains and their queue: hardest first, ties by creation order (so the
//! order never depends on the thread count), with the memory the queue holds counted against a
//! cap.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use crate::bounds::local::{HiddenBounds, KeptBounds, Known, Phase, Splits, StoredMultipliers};

/// How a subdomain is to be split, chosen when it was bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// Halve input coordinate `i`.
    Input(usize),
    /// Fix the phase of a hidden unit `(layer, unit)`.
    Relu(usize, usize),
    /// Nothing left to split.
    Exhausted,
}

/// A subdomain: an input box, the phases it fixes, the disjuncts of the unsafe region its
/// bounds have not excluded, and its bound.
#[derive(Clone, Debug)]
pub struct Subdomain {
    /// Lower ends of the box (shared with siblings where a ReLU split leaves it unchanged).
    pub lo: Arc<Vec<f64>>,
    /// Upper ends.
    pub hi: Arc<Vec<f64>>,
    /// The phases fixed.
    pub splits: Splits,
    /// The disjuncts still open, ascending.
    pub open: Vec<usize>,
    /// Splits from the root.
    pub depth: usize,
    /// The smallest, over the open disjuncts, of the disjunct's best row bound (how far the
    /// bounds are from excluding it; `-inf` before bounding).
    pub gap: f64,
    /// How to split it.
    pub branch: Branch,
    /// Creation order, the tie-break.
    pub id: u64,
    /// The slopes and split multipliers its bounds were found with, and the objective's rows
    /// they are for (its children's search starts there; shared between siblings).
    pub warm: Option<Arc<(Vec<usize>, StoredMultipliers)>>,
    /// Its parent's hidden bounds: for an input split its own are intersected with them
    /// ([`Known::Within`]), for a ReLU split reused below its newest split ([`Known::Refine`]);
    /// shared between siblings.
    pub inherited: Option<Arc<KeptBounds>>,
    /// The hidden layer of the split that made it (a ReLU split's child).
    pub newest: Option<usize>,
}

impl Subdomain {
    /// The two children `branch` makes (none when exhausted), numbered from `next_id`. Their
    /// union is the subdomain: two halves of a box, or the two phases of a unit.
    pub fn children(&self, next_id: &mut u64) -> Vec<Subdomain> {
        let newest = match self.branch {
            Branch::Relu(l, _) => Some(l),
            _ => None,
        };
        let mut child = |lo: Arc<Vec<f64>>, hi: Arc<Vec<f64>>, splits: Splits| {
            *next_id += 1;
            Subdomain {
                lo,
                hi,
                splits,
                open: self.open.clone(),
                depth: self.depth + 1,
                gap: f64::NEG_INFINITY,
                branch: Branch::Exhausted,
                id: *next_id,
                warm: self.warm.clone(),
                inherited: self.inherited.clone(),
                newest,
            }
        };
        match self.branch {
            Branch::Exhausted => Vec::new(),
            Branch::Input(i) => {
                let mid = super::branch::midpoint(self.lo[i], self.hi[i]);
                let (mut low_hi, mut high_lo) = ((*self.hi).clone(), (*self.lo).clone());
                low_hi[i] = mid;
                high_lo[i] = mid;
                vec![
                    child(self.lo.clone(), Arc::new(low_hi), self.splits.clone()),
                    child(Arc::new(high_lo), self.hi.clone(), self.splits.clone()),
                ]
            }
            Branch::Relu(l, j) => [Phase::Active, Phase::Inactive]
                .into_iter()
                .map(|p| child(self.lo.clone(), self.hi.clone(), self.splits.with(l, j, p)))
                .collect(),
        }
    }

    /// The bytes of the parts it holds alone: itself, its open disjuncts and its splits.
    fn own_bytes(&self) -> usize {
        std::mem::size_of::<Subdomain>() + 8 * self.open.len() + 3 * 8 * self.splits.len()
    }

    /// The parts it may share with other subdomains (the ends of its box, its starting point
    /// and its inherited bounds), each as its address and bytes.
    fn shared_parts(&self) -> Vec<(usize, usize)> {
        let mut parts = vec![
            (Arc::as_ptr(&self.lo) as usize, 8 * self.lo.len()),
            (Arc::as_ptr(&self.hi) as usize, 8 * self.hi.len()),
        ];
        if let Some(w) = &self.warm {
            parts.push((Arc::as_ptr(w) as usize, 8 * w.0.len() + w.1.bytes()));
        }
        if let Some(b) = &self.inherited {
            parts.push((Arc::as_ptr(b) as usize, b.bytes()));
        }
        parts
    }

    /// What its hidden bounds start from: its parent's bounds for an input split (none at the
    /// root), or `base`, the root's, computed again above its shallowest split where `refine`
    /// says so ([`Known::Refine`]).
    pub fn known<'a>(&'a self, base: Option<&'a HiddenBounds>, refine: bool) -> Known<'a> {
        match (base, &self.inherited) {
            (Some(root), kept) => Known::Refine {
                root,
                parent: kept.as_deref().zip(self.newest),
                refine,
            },
            (None, Some(w)) => Known::Within(&w.pre),
            (None, None) => Known::Nothing,
        }
    }
}

/// Queue order: the smallest gap first, then the oldest.
struct Hardest(Subdomain);

impl PartialEq for Hardest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Hardest {}
impl PartialOrd for Hardest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Hardest {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap pops the greatest: the smallest gap, then the smallest id, is greatest
        (other.0.gap.total_cmp(&self.0.gap)).then(other.0.id.cmp(&self.0.id))
    }
}

/// The open subdomains, hardest first, with the bytes they hold: each subdomain's own parts,
/// and each part several share (a box, a starting point, inherited bounds) once while any
/// subdomain in the queue holds it.
#[derive(Default)]
pub struct Queue {
    heap: BinaryHeap<Hardest>,
    bytes: usize,
    peak: usize,
    /// Per shared part held in the queue (by address, alive while counted): how many
    /// subdomains in the queue hold it.
    shared: HashMap<usize, usize>,
}

impl Queue {
    /// Adds a subdomain.
    pub fn push(&mut self, d: Subdomain) {
        self.bytes += d.own_bytes();
        for (at, bytes) in d.shared_parts() {
            let holders = self.shared.entry(at).or_insert(0);
            if *holders == 0 {
                self.bytes += bytes;
            }
            *holders += 1;
        }
        self.peak = self.peak.max(self.heap.len() + 1);
        self.heap.push(Hardest(d));
    }

    /// Up to `n` of the hardest subdomains, hardest first.
    pub fn pop_hardest(&mut self, n: usize) -> Vec<Subdomain> {
        let mut out = Vec::with_capacity(n.min(self.heap.len()));
        while out.len() < n {
            let Some(Hardest(d)) = self.heap.pop() else {
                break;
            };
            self.bytes -= d.own_bytes();
            for (at, bytes) in d.shared_parts() {
                if let Some(holders) = self.shared.get_mut(&at) {
                    *holders -= 1;
                    if *holders == 0 {
                        self.shared.remove(&at);
                        self.bytes -= bytes;
                    }
                }
            }
            out.push(d);
        }
        out
    }

    /// Subdomains held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most subdomains held at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// The gap of the hardest subdomain held (the smallest: every open subdomain's bounds are
    /// at least this far from closing it); `None` when none is held.
    pub fn hardest_gap(&self) -> Option<f64> {
        self.heap.peek().map(|h| h.0.gap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dom(gap: f64, id: u64) -> Subdomain {
        Subdomain {
            lo: Arc::new(vec![0.0, 0.0]),
            hi: Arc::new(vec![1.0, 4.0]),
            splits: Splits::none(),
            open: vec![0],
            depth: 0,
            gap,
            branch: Branch::Input(1),
            id,
            warm: None,
            inherited: None,
            newest: None,
        }
    }

    #[test]
    fn the_queue_pops_the_smallest_gap_then_the_oldest() {
        let mut q = Queue::default();
        for (g, id) in [
            (0.5, 1),
            (-1.0, 2),
            (-1.0, 0),
            (f64::NEG_INFINITY, 7),
            (2.0, 3),
        ] {
            q.push(dom(g, id));
        }
        let ids: Vec<u64> = q.pop_hardest(10).iter().map(|d| d.id).collect();
        assert_eq!(ids, vec![7, 0, 2, 1, 3]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
        assert_eq!(q.peak(), 5);
    }

    /// A part several subdomains share is counted once while any of them is queued: a ReLU
    /// split's children share their parent's box.
    #[test]
    fn shared_parts_are_counted_once_while_held() {
        let mut q = Queue::default();
        let mut parent = dom(0.0, 1);
        parent.branch = Branch::Relu(0, 0);
        parent.splits = Splits::none();
        let mut next = 1;
        let children = parent.children(&mut next);
        assert!(Arc::ptr_eq(&children[0].lo, &children[1].lo));
        let box_bytes = 8 * (2 + 2);
        let own = children[0].own_bytes();
        q.push(children[0].clone());
        assert_eq!(q.bytes(), own + box_bytes);
        q.push(children[1].clone());
        assert_eq!(q.bytes(), 2 * own + box_bytes);
        q.pop_hardest(1);
        assert_eq!(q.bytes(), own + box_bytes);
        q.pop_hardest(1);
        assert_eq!(q.bytes(), 0);
        // subdomains with boxes of their own count each
        let alone = dom(0.0, 5).own_bytes();
        q.push(dom(0.0, 5));
        q.push(dom(0.0, 6));
        assert_eq!(q.bytes(), 2 * (alone + box_bytes));
    }

    #[test]
    fn children_cover_their_parent() {
        let mut next = 10;
        let d = dom(0.0, 1);
        let c = d.children(&mut next);
        assert_eq!((c[0].id, c[1].id, next), (11, 12, 12));
        assert_eq!((c[0].depth, c[1].depth), (1, 1));
        assert_eq!((&*c[0].lo, &*c[0].hi), (&vec![0.0, 0.0], &vec![1.0, 2.0]));
        assert_eq!((&*c[1].lo, &*c[1].hi), (&vec![0.0, 2.0], &vec![1.0, 4.0]));
        let r = Subdomain {
            branch: Branch::Relu(1, 3),
            ..d.clone()
        };
        let c = r.children(&mut next);
        let phases: Vec<_> = c
            .iter()
            .map(|k| k.splits.iter().copied().collect::<Vec<_>>())
            .collect();
        assert_eq!(
            phases,
            vec![vec![(1, 3, Phase::Active)], vec![(1, 3, Phase::Inactive)]]
        );
        assert!(Arc::ptr_eq(&c[0].lo, &d.lo));
        let e = Subdomain {
            branch: Branch::Exhausted,
            ..d
        };
        assert!(e.children(&mut next).is_empty());
    }
}
