//! Retained bytes: the dominator tree of a heap graph from its roots (Lengauer-Tarjan, the
//! simple version with path compression, iterative: no recursion however deep the heap).
//! An object's retained bytes are its own plus those of every object it dominates (what a
//! collection would free if it were gone); a type's are those of its objects that no other
//! object of the same type dominates (so nested objects of one type are not counted twice).
//! Objects no root reaches retain nothing.
//!
//! Memory, for `n` nodes of which `k` are reachable and `e` edges among them: every index
//! is a `u32` (a graph has fewer than 2^32 - 1 nodes and at most 2^32 - 1 edges: see
//! [`Csr`]). The phases free what the next one does not need: [`Dfs::new`] reads the graph
//! once (4 bytes a node of scratch) and keeps only what the dominator computation needs
//! (the preorder, the tree parents and the predecessors: 12 bytes a reached node and 4 an
//! edge), so the caller may free the graph before [`type_retained`]; the dominator
//! computation adds 16 bytes a reached node (its parent array doubles as the forest's
//! ancestor array, its result as the buckets' links) and frees the predecessors before the
//! retained bytes (8 bytes a reached node) and the dominator tree's children (8) are made.

use crate::hash::FxHashMap;

const NONE: u32 = u32::MAX;

/// A graph as adjacency lists: node `i`'s successors are
/// `targets[offsets[i]..offsets[i + 1]]`. Nodes are `u32` below `u32::MAX` (which is
/// [`NONE`]), edges counted in `u32`: a `.gcdump` has at most 2^31 - 1 nodes and fewer edges
/// than bytes of its node blob (at most 2^31 - 1); a [`super::HeapGraph`]'s builder stops
/// below 2^32 - 2 objects and 2^32 - 1 references and roots whatever its limits say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Csr {
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
}

impl Csr {
    /// Nodes.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn successors(&self, i: usize) -> &[u32] {
        &self.targets[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// Objects, shallow and retained bytes of one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedStat {
    /// The type's name.
    pub name: String,
    /// Objects.
    pub count: u64,
    /// Their own bytes.
    pub bytes: u64,
    /// The bytes they keep alive (their own included), each object counted once.
    pub retained: u64,
}

/// Turns per-slot counts in `at[1..]` (`at[0]` being 0) into offsets: `at[i]` becomes the
/// sum of the counts before slot `i`.
fn prefix_sums(at: &mut [u32]) {
    for i in 1..at.len() {
        at[i] += at[i - 1];
    }
}

/// After `at[i]` served as slot `i`'s fill cursor (so it now holds slot `i + 1`'s start),
/// shifts the offsets back: a CSR filled with no second array of cursors.
fn unshift(at: &mut [u32]) {
    for i in (1..at.len()).rev() {
        at[i] = at[i - 1];
    }
    if let Some(first) = at.first_mut() {
        *first = 0;
    }
}

/// A depth-first search of a graph from its root, holding all that the dominator
/// computation needs from the graph (which may be freed once this is made). Nodes are
/// numbered in preorder ("preorder numbers"); the root is 0.
pub(crate) struct Dfs {
    /// Nodes of the graph.
    nodes: usize,
    /// Per preorder number, its node (the reached nodes in preorder).
    vertex: Vec<u32>,
    /// Per preorder number, its parent's in the search tree (`NONE` for the root).
    parent: Vec<u32>,
    /// Per preorder number `w`, its predecessors' preorder numbers are
    /// `preds[pred_at[w]..pred_at[w + 1]]`.
    pred_at: Vec<u32>,
    preds: Vec<u32>,
}

impl Dfs {
    /// Searches `g` from `root` (iteratively: the stack holds one entry per level of depth,
    /// 8 bytes each). A `root` that is no node of `g` (an empty graph, or a file naming a
    /// node it does not hold) reaches nothing.
    pub fn new(g: &Csr, root: usize) -> Dfs {
        let n = g.len();
        let mut dfs = Dfs {
            nodes: n,
            vertex: Vec::new(),
            parent: Vec::new(),
            pred_at: Vec::new(),
            preds: Vec::new(),
        };
        if root >= n {
            return dfs;
        }
        // Reserved for every node, touched (and resident) only for those reached.
        dfs.vertex.reserve_exact(n);
        dfs.parent.reserve_exact(n);
        let mut dfnum = vec![NONE; n];
        dfnum[root] = 0;
        dfs.vertex.push(root as u32);
        dfs.parent.push(NONE);
        // (node, position of its next successor in `g.targets`).
        let mut stack: Vec<(u32, u32)> = vec![(root as u32, g.offsets[root])];
        while let Some(top) = stack.last_mut() {
            let (v, at) = *top;
            if at == g.offsets[v as usize + 1] {
                stack.pop();
                continue;
            }
            top.1 += 1;
            let w = g.targets[at as usize];
            if dfnum[w as usize] == NONE {
                dfnum[w as usize] = dfs.vertex.len() as u32;
                dfs.parent.push(dfnum[v as usize]);
                dfs.vertex.push(w);
                stack.push((w, g.offsets[w as usize]));
            }
        }
        drop(stack);
        let k = dfs.vertex.len();
        // Predecessors among reached nodes, in preorder numbers (every successor of a
        // reached node is reached).
        let mut pred_at = vec![0u32; k + 1];
        for &v in &dfs.vertex {
            for &w in g.successors(v as usize) {
                pred_at[dfnum[w as usize] as usize + 1] += 1;
            }
        }
        prefix_sums(&mut pred_at);
        let mut preds = vec![0u32; pred_at[k] as usize];
        for (d, &v) in dfs.vertex.iter().enumerate() {
            for &w in g.successors(v as usize) {
                let slot = &mut pred_at[dfnum[w as usize] as usize];
                preds[*slot as usize] = d as u32;
                *slot += 1;
            }
        }
        unshift(&mut pred_at);
        dfs.pred_at = pred_at;
        dfs.preds = preds;
        dfs
    }
}

/// The dominator tree of the nodes a [`Dfs`] reached, in its preorder numbers.
struct DomTree {
    /// Nodes of the graph.
    nodes: usize,
    /// Per preorder number, its node.
    vertex: Vec<u32>,
    /// Per preorder number, its immediate dominator's (always smaller; `NONE` for the root).
    idom: Vec<u32>,
}

/// The dominator tree of what `dfs` reached (consumed: its arrays are reused or freed).
fn dominators(dfs: Dfs) -> DomTree {
    let Dfs {
        nodes,
        vertex,
        parent,
        pred_at,
        preds,
    } = dfs;
    let k = vertex.len();
    let mut semi: Vec<u32> = (0..k as u32).collect();
    let mut label: Vec<u32> = (0..k as u32).collect();
    // The forest's links: node `x` is linked (in the forest) once the loop below has
    // passed it, i.e. when `x >= first_linked`; a linked node's ancestor is `anc[x]`,
    // which starts as its parent (the link Lengauer-Tarjan makes) and is shortened by path
    // compression. An unlinked node's entry is its parent still, read when it is reached.
    let mut anc = parent;
    // Per node, the next node of the bucket it is in while it waits in one, then its
    // immediate dominator (it leaves its bucket exactly once, when that is known).
    let mut idom = vec![NONE; k];
    let mut bucket_head = vec![NONE; k];
    let mut path: Vec<u32> = Vec::new();

    // eval with path compression, iteratively.
    let eval = |v: u32,
                first_linked: u32,
                anc: &mut Vec<u32>,
                label: &mut Vec<u32>,
                semi: &Vec<u32>,
                path: &mut Vec<u32>|
     -> u32 {
        if v < first_linked {
            return v;
        }
        // Collect the path up to the node whose ancestor is the forest root.
        path.clear();
        let mut x = v;
        while anc[x as usize] >= first_linked {
            path.push(x);
            x = anc[x as usize];
        }
        // Compress from the top down.
        while let Some(y) = path.pop() {
            let a = anc[y as usize];
            if semi[label[a as usize] as usize] < semi[label[y as usize] as usize] {
                label[y as usize] = label[a as usize];
            }
            anc[y as usize] = anc[a as usize];
        }
        label[v as usize]
    };

    for w in (1..k).rev() {
        let p = anc[w];
        // Nodes after `w` are linked.
        for &v in &preds[pred_at[w] as usize..pred_at[w + 1] as usize] {
            let u = eval(v, w as u32 + 1, &mut anc, &mut label, &semi, &mut path);
            if semi[u as usize] < semi[w] {
                semi[w] = semi[u as usize];
            }
        }
        let s = semi[w] as usize;
        idom[w] = bucket_head[s];
        bucket_head[s] = w as u32;
        // Link `w` (its entry in `anc` is its parent already): `w` on are linked.
        let mut v = bucket_head[p as usize];
        bucket_head[p as usize] = NONE;
        while v != NONE {
            let next = idom[v as usize];
            let u = eval(v, w as u32, &mut anc, &mut label, &semi, &mut path);
            idom[v as usize] = if semi[u as usize] < semi[v as usize] {
                u
            } else {
                p
            };
            v = next;
        }
    }
    drop((anc, label, bucket_head, path, pred_at, preds));
    for w in 1..k {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
    }
    DomTree {
        nodes,
        vertex,
        idom,
    }
}

/// Per preorder number, the bytes its node retains, from `size` per node.
fn retained(tree: &DomTree, size: &dyn Fn(usize) -> u64) -> Vec<u64> {
    let mut retained = vec![0u64; tree.vertex.len()];
    for d in (0..tree.vertex.len()).rev() {
        retained[d] += size(tree.vertex[d] as usize);
        let p = tree.idom[d];
        if p != NONE {
            retained[p as usize] += retained[d];
        }
    }
    retained
}

/// Per type name: objects, shallow bytes and retained bytes (an object dominated by one of
/// its own type is not counted again), biggest retained first, from the search of the graph
/// from its root (`dfs`, consumed). `is_object(i)` says which nodes are objects, `type_of(i)`
/// and `name_of(t)` name them.
pub(crate) fn type_retained(
    dfs: Dfs,
    size: &dyn Fn(usize) -> u64,
    is_object: &dyn Fn(usize) -> bool,
    type_of: &dyn Fn(usize) -> usize,
    type_count: usize,
    name_of: &dyn Fn(usize) -> String,
) -> Vec<RetainedStat> {
    if dfs.vertex.is_empty() {
        return Vec::new();
    }
    let tree = dominators(dfs);
    let retained = retained(&tree, size);
    let DomTree {
        nodes,
        vertex,
        idom,
    } = tree;
    let k = vertex.len();
    // The dominator tree's children (CSR, in preorder numbers).
    let mut kid_at = vec![0u32; k + 1];
    for &d in &idom {
        if d != NONE {
            kid_at[d as usize + 1] += 1;
        }
    }
    prefix_sums(&mut kid_at);
    let mut kids = vec![0u32; kid_at[k] as usize];
    for (v, &d) in idom.iter().enumerate() {
        if d != NONE {
            let slot = &mut kid_at[d as usize];
            kids[*slot as usize] = v as u32;
            *slot += 1;
        }
    }
    unshift(&mut kid_at);
    drop(idom);
    let mut per_type: Vec<(u64, u64, u64)> = vec![(0, 0, 0); type_count];
    for i in 0..nodes {
        if is_object(i) {
            let e = &mut per_type[type_of(i)];
            e.0 += 1;
            e.1 += size(i);
        }
    }
    // Walk the dominator tree from the root (preorder number 0) with, per type, how many
    // of its objects are above; the stack holds (preorder number, position of its next
    // child in `kids`) per level.
    let mut active = vec![0u32; type_count];
    let mut stack: Vec<(u32, u32)> = Vec::new();
    let enter = |d: usize, active: &mut Vec<u32>, per_type: &mut Vec<(u64, u64, u64)>| {
        let v = vertex[d] as usize;
        if is_object(v) {
            let t = type_of(v);
            if active[t] == 0 {
                per_type[t].2 += retained[d];
            }
            active[t] += 1;
        }
    };
    enter(0, &mut active, &mut per_type);
    stack.push((0, kid_at[0]));
    while let Some(top) = stack.last_mut() {
        let (d, at) = *top;
        if at == kid_at[d as usize + 1] {
            stack.pop();
            let v = vertex[d as usize] as usize;
            if is_object(v) {
                active[type_of(v)] -= 1;
            }
            continue;
        }
        top.1 += 1;
        let c = kids[at as usize];
        enter(c as usize, &mut active, &mut per_type);
        stack.push((c, kid_at[c as usize]));
    }
    let mut by_name: FxHashMap<String, (u64, u64, u64)> = FxHashMap::default();
    for (t, (c, b, r)) in per_type.into_iter().enumerate() {
        if c == 0 {
            continue;
        }
        let e = by_name.entry(name_of(t)).or_insert((0, 0, 0));
        e.0 += c;
        e.1 += b;
        e.2 += r;
    }
    let mut out: Vec<RetainedStat> = by_name
        .into_iter()
        .map(|(name, (count, bytes, retained))| RetainedStat {
            name,
            count,
            bytes,
            retained,
        })
        .collect();
    out.sort_by(|a, b| {
        b.retained
            .cmp(&a.retained)
            .then(b.bytes.cmp(&a.bytes))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}
#[cfg(test)]
mod tests {
    use super::*;

    fn csr(n: usize, edges: &[(u32, u32)]) -> Csr {
        let mut offsets = vec![0u32; n + 1];
        for &(a, _) in edges {
            offsets[a as usize + 1] += 1;
        }
        prefix_sums(&mut offsets);
        let mut targets = vec![0u32; edges.len()];
        for &(a, b) in edges {
            let slot = &mut offsets[a as usize];
            targets[*slot as usize] = b;
            *slot += 1;
        }
        unshift(&mut offsets);
        Csr { offsets, targets }
    }

    /// Immediate dominators per node (`NONE` for the root and the unreached).
    fn idom_nodes(g: &Csr, root: usize) -> Vec<u32> {
        let t = dominators(Dfs::new(g, root));
        let mut out = vec![NONE; t.nodes];
        for (d, &i) in t.idom.iter().enumerate() {
            if i != NONE {
                out[t.vertex[d] as usize] = t.vertex[i as usize];
            }
        }
        out
    }

    /// Retained bytes per node (0 for the unreached).
    fn retained_nodes(g: &Csr, root: usize, size: &dyn Fn(usize) -> u64) -> Vec<u64> {
        let t = dominators(Dfs::new(g, root));
        let r = retained(&t, size);
        let mut out = vec![0u64; t.nodes];
        for (d, &v) in t.vertex.iter().enumerate() {
            out[v as usize] = r[d];
        }
        out
    }

    /// Immediate dominators by brute force: d dominates v if v is unreachable without d.
    fn brute(g: &Csr, root: usize) -> Vec<u32> {
        let n = g.len();
        let reach = |skip: usize| {
            let mut seen = vec![false; n];
            if skip == root {
                return seen;
            }
            let mut st = vec![root];
            seen[root] = true;
            while let Some(v) = st.pop() {
                for &w in g.successors(v) {
                    let w = w as usize;
                    if w != skip && !seen[w] {
                        seen[w] = true;
                        st.push(w);
                    }
                }
            }
            seen
        };
        let all = reach(usize::MAX);
        let mut doms: Vec<Vec<usize>> = vec![Vec::new(); n];
        for d in 0..n {
            let r = reach(d);
            for v in 0..n {
                if all[v] && v != d && !r[v] {
                    doms[v].push(d);
                }
            }
        }
        (0..n)
            .map(|v| {
                if !all[v] || v == root {
                    return NONE;
                }
                // The immediate dominator: the dominator every other dominator dominates.
                *doms[v]
                    .iter()
                    .find(|&&d| doms[v].iter().all(|&o| o == d || doms[d].contains(&o)))
                    .unwrap() as u32
            })
            .collect()
    }

    #[test]
    fn dominators_match_brute_force_on_pseudo_random_graphs() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..300 {
            let n = 2 + (next() % 14) as usize;
            let m = (next() % (3 * n as u64)) as usize;
            let edges: Vec<(u32, u32)> = (0..m)
                .map(|_| ((next() % n as u64) as u32, (next() % n as u64) as u32))
                .collect();
            let g = csr(n, &edges);
            assert_eq!(
                idom_nodes(&g, 0),
                brute(&g, 0),
                "case {}: {:?}",
                case,
                edges
            );
        }
    }

    #[test]
    fn dominators_match_brute_force_on_larger_graphs() {
        // Deeper forests than the small cases: path compression over long paths, buckets
        // holding several nodes, nodes the root does not reach.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..40 {
            let n = 20 + (next() % 60) as usize;
            let mut edges: Vec<(u32, u32)> = (1..n as u32).map(|i| (i - 1, i)).collect();
            for _ in 0..(next() % (2 * n as u64)) {
                edges.push(((next() % n as u64) as u32, (next() % n as u64) as u32));
            }
            // Cut the chain somewhere: the rest is reached (or not) by the random edges.
            let cut = 1 + (next() % (n as u64 - 1)) as usize;
            edges.remove(cut - 1);
            let g = csr(n, &edges);
            let root = (next() % 3) as usize;
            assert_eq!(idom_nodes(&g, root), brute(&g, root), "case {}", case);
        }
    }

    #[test]
    fn a_deep_chain_needs_no_recursion() {
        // 0 -> 1 -> ... -> n-1, and every node back to the root.
        let n = 300_000u32;
        let mut edges: Vec<(u32, u32)> = (1..n).map(|i| (i - 1, i)).collect();
        edges.extend((1..n).map(|i| (i, 0)));
        let g = csr(n as usize, &edges);
        let idom = idom_nodes(&g, 0);
        assert_eq!(idom[0], NONE);
        assert!((1..n as usize).all(|i| idom[i] == i as u32 - 1));
        let r = retained_nodes(&g, 0, &|_| 1);
        assert!((0..n as usize).all(|i| r[i] == u64::from(n) - i as u64));
        // One type: only the root's object counts, retaining everything.
        let stats = type_retained(Dfs::new(&g, 0), &|_| 1, &|_| true, &|_| 0, 1, &|_| {
            "T".to_string()
        });
        assert_eq!(stats[0].retained, u64::from(n));
        assert_eq!(stats[0].count, u64::from(n));
    }

    #[test]
    fn a_root_out_of_the_graph_reaches_nothing() {
        let g = csr(3, &[(0, 1), (1, 2)]);
        assert_eq!(idom_nodes(&g, 7), vec![NONE; 3]);
        let none = type_retained(Dfs::new(&g, 3), &|_| 1, &|_| true, &|_| 0, 1, &|_| {
            "T".to_string()
        });
        assert!(none.is_empty());
        assert!(idom_nodes(&Csr::default(), 0).is_empty());
    }

    #[test]
    fn retained_bytes_of_a_small_heap() {
        // root(0) -> a(1) -> b(2), root -> c(3) -> b; a -> d(4); e(5) unreachable.
        let g = csr(6, &[(0, 1), (1, 2), (0, 3), (3, 2), (1, 4)]);
        let sizes = [0u64, 10, 20, 30, 40, 50];
        assert_eq!(idom_nodes(&g, 0)[2], 0); // b is reached from a and from c
        let r = retained_nodes(&g, 0, &|i| sizes[i]);
        assert_eq!(r, vec![100, 50, 20, 30, 40, 0]);
        // Types: a and d are "T", the others "U"; the root is no object.
        let types = [0usize, 0, 1, 1, 0, 1];
        let stats = type_retained(
            Dfs::new(&g, 0),
            &|i| sizes[i],
            &|i| i != 0,
            &|i| types[i],
            2,
            &|t| ["T", "U"][t].to_string(),
        );
        assert_eq!(
            stats,
            vec![
                // a retains d (same type: counted once) -> 50.
                RetainedStat {
                    name: "U".into(),
                    count: 3,
                    bytes: 100,
                    retained: 50
                },
                RetainedStat {
                    name: "T".into(),
                    count: 2,
                    bytes: 50,
                    retained: 50
                },
            ]
        );
    }
}
