//! Retained bytes: the dominator tree of a heap graph from its roots (Lengauer-Tarjan, the
//! simple version with path compression, iterative: no recursion however deep the heap).
//! An object's retained bytes are its own plus those of every object it dominates (what a
//! collection would free if it were gone); a type's are those of its objects that no other
//! object of the same type dominates (so nested objects of one type are not counted twice).
//! Objects no root reaches retain nothing.

use crate::hash::FxHashMap;

const NONE: u32 = u32::MAX;

/// A graph as adjacency lists: node `i`'s successors are
/// `targets[offsets[i]..offsets[i + 1]]`.
pub(crate) struct Csr {
    pub offsets: Vec<usize>,
    pub targets: Vec<u32>,
}

impl Csr {
    fn successors(&self, i: usize) -> &[u32] {
        &self.targets[self.offsets[i]..self.offsets[i + 1]]
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

/// The immediate dominator of every node reachable from `root` (`NONE` for the others and
/// for the root itself), and the nodes in depth-first preorder.
fn dominators(g: &Csr, root: usize) -> (Vec<u32>, Vec<u32>) {
    let n = g.offsets.len().saturating_sub(1);
    if root >= n {
        // No such root (an empty graph, or a file naming a node it does not hold): nothing
        // is reached.
        return (vec![NONE; n], Vec::new());
    }
    // Depth-first numbering (iterative).
    let mut dfnum = vec![NONE; n];
    let mut vertex: Vec<u32> = Vec::new();
    let mut parent: Vec<u32> = Vec::new();
    let mut stack: Vec<(u32, u32)> = vec![(root as u32, NONE)];
    while let Some((v, p)) = stack.pop() {
        if dfnum[v as usize] != NONE {
            continue;
        }
        dfnum[v as usize] = vertex.len() as u32;
        vertex.push(v);
        parent.push(p);
        for &w in g.successors(v as usize).iter().rev() {
            if dfnum[w as usize] == NONE {
                stack.push((w, dfnum[v as usize]));
            }
        }
    }
    let k = vertex.len();
    // Predecessors among reachable nodes, in dfnum space.
    let mut pred_count = vec![0usize; k + 1];
    for &v in &vertex {
        for &w in g.successors(v as usize) {
            let dw = dfnum[w as usize];
            if dw != NONE {
                pred_count[dw as usize + 1] += 1;
            }
        }
    }
    for i in 0..k {
        pred_count[i + 1] += pred_count[i];
    }
    let mut fill = pred_count.clone();
    let mut preds = vec![0u32; pred_count[k]];
    for (d, &v) in vertex.iter().enumerate() {
        for &w in g.successors(v as usize) {
            let dw = dfnum[w as usize];
            if dw != NONE {
                preds[fill[dw as usize]] = d as u32;
                fill[dw as usize] += 1;
            }
        }
    }
    drop(fill);
    let mut semi: Vec<u32> = (0..k as u32).collect();
    let mut idom = vec![NONE; k];
    let mut ancestor = vec![NONE; k];
    let mut label: Vec<u32> = (0..k as u32).collect();
    // Buckets as linked lists: head per node, next per node.
    let mut bucket_head = vec![NONE; k];
    let mut bucket_next = vec![NONE; k];
    let mut path: Vec<u32> = Vec::new();

    // eval with path compression, iteratively.
    let eval = |v: u32,
                ancestor: &mut Vec<u32>,
                label: &mut Vec<u32>,
                semi: &Vec<u32>,
                path: &mut Vec<u32>|
     -> u32 {
        if ancestor[v as usize] == NONE {
            return v;
        }
        // Collect the path up to the node whose ancestor is the forest root.
        path.clear();
        let mut x = v;
        while ancestor[ancestor[x as usize] as usize] != NONE {
            path.push(x);
            x = ancestor[x as usize];
        }
        // Compress from the top down.
        while let Some(y) = path.pop() {
            let a = ancestor[y as usize];
            if semi[label[a as usize] as usize] < semi[label[y as usize] as usize] {
                label[y as usize] = label[a as usize];
            }
            ancestor[y as usize] = ancestor[a as usize];
        }
        label[v as usize]
    };

    for w in (1..k).rev() {
        let p = parent[w];
        for &v in &preds[pred_count[w]..pred_count[w + 1]] {
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            if semi[u as usize] < semi[w] {
                semi[w] = semi[u as usize];
            }
        }
        let s = semi[w] as usize;
        bucket_next[w] = bucket_head[s];
        bucket_head[s] = w as u32;
        ancestor[w] = p;
        let mut v = bucket_head[p as usize];
        bucket_head[p as usize] = NONE;
        while v != NONE {
            let next = bucket_next[v as usize];
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            idom[v as usize] = if semi[u as usize] < semi[v as usize] {
                u
            } else {
                p
            };
            v = next;
        }
    }
    for w in 1..k {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
    }
    // Back to node space.
    let mut idom_node = vec![NONE; n];
    for w in 1..k {
        idom_node[vertex[w] as usize] = vertex[idom[w] as usize];
    }
    (idom_node, vertex)
}

/// Per node, the bytes it retains (0 for nodes `root` does not reach), from `size` per
/// node; and the dominator tree (immediate dominators) and preorder.
pub(crate) fn retained(
    g: &Csr,
    root: usize,
    size: &dyn Fn(usize) -> u64,
) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
    let (idom, order) = dominators(g, root);
    let mut retained = vec![0u64; idom.len()];
    for &v in order.iter().rev() {
        let v = v as usize;
        retained[v] += size(v);
        let d = idom[v];
        if d != NONE {
            retained[d as usize] += retained[v];
        }
    }
    (retained, idom, order)
}

/// Per type name: objects, shallow bytes and retained bytes (an object dominated by one of
/// its own type is not counted again), biggest retained first. `is_object(i)` says which
/// nodes are objects, `type_of(i)` and `name_of(t)` name them.
pub(crate) fn type_retained(
    g: &Csr,
    root: usize,
    size: &dyn Fn(usize) -> u64,
    is_object: &dyn Fn(usize) -> bool,
    type_of: &dyn Fn(usize) -> usize,
    type_count: usize,
    name_of: &dyn Fn(usize) -> String,
) -> Vec<RetainedStat> {
    if root >= g.offsets.len().saturating_sub(1) {
        return Vec::new();
    }
    let (retained, idom, order) = retained(g, root, size);
    let n = idom.len();
    // The dominator tree's children, in preorder (CSR).
    let mut count = vec![0usize; n + 1];
    for &d in &idom {
        if d != NONE {
            count[d as usize + 1] += 1;
        }
    }
    for i in 0..n {
        count[i + 1] += count[i];
    }
    let mut fill = count.clone();
    let mut kids = vec![0u32; count[n]];
    for &v in &order {
        let d = idom[v as usize];
        if d != NONE {
            kids[fill[d as usize]] = v;
            fill[d as usize] += 1;
        }
    }
    drop(fill);
    let mut per_type: Vec<(u64, u64, u64)> = vec![(0, 0, 0); type_count];
    for i in 0..n {
        if is_object(i) {
            let e = &mut per_type[type_of(i)];
            e.0 += 1;
            e.1 += size(i);
        }
    }
    // Walk the dominator tree with, per type, how many of its objects are above.
    let mut active = vec![0u32; type_count];
    let mut stack: Vec<(u32, bool)> = vec![(root as u32, false)];
    while let Some((v, done)) = stack.pop() {
        let v = v as usize;
        let obj = is_object(v);
        if done {
            if obj {
                active[type_of(v)] -= 1;
            }
            continue;
        }
        if obj {
            let t = type_of(v);
            if active[t] == 0 {
                per_type[t].2 += retained[v];
            }
            active[t] += 1;
        }
        stack.push((v as u32, true));
        for &c in &kids[count[v]..count[v + 1]] {
            stack.push((c, false));
        }
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
        let mut offsets = vec![0usize; n + 1];
        for &(a, _) in edges {
            offsets[a as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; edges.len()];
        for &(a, b) in edges {
            targets[fill[a as usize]] = b;
            fill[a as usize] += 1;
        }
        Csr { offsets, targets }
    }

    /// Immediate dominators by brute force: d dominates v if v is unreachable without d.
    fn brute(g: &Csr, root: usize) -> Vec<u32> {
        let n = g.offsets.len() - 1;
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
            let (idom, _) = dominators(&g, 0);
            assert_eq!(idom, brute(&g, 0), "case {}: {:?}", case, edges);
        }
    }

    #[test]
    fn retained_bytes_of_a_small_heap() {
        // root(0) -> a(1) -> b(2), root -> c(3) -> b; a -> d(4); e(5) unreachable.
        let g = csr(6, &[(0, 1), (1, 2), (0, 3), (3, 2), (1, 4)]);
        let sizes = [0u64, 10, 20, 30, 40, 50];
        let (r, idom, _) = retained(&g, 0, &|i| sizes[i]);
        assert_eq!(idom[2], 0); // b is reached from a and from c
        assert_eq!(r, vec![100, 50, 20, 30, 40, 0]);
        // Types: a and d are "T", the others "U"; the root is no object.
        let types = [0usize, 0, 1, 1, 0, 1];
        let stats = type_retained(&g, 0, &|i| sizes[i], &|i| i != 0, &|i| types[i], 2, &|t| {
            ["T", "U"][t].to_string()
        });
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
