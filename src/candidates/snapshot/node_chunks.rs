//! The snapshot's providers, stored in shared chunks: a copy of the
//! snapshot (each catch-up patch makes one) shares every chunk, and
//! changing a provider copies only its chunk. What a patch costs then
//! follows the providers it changes, not the number there are: with one
//! flat list, each patch copied a million pointers at a million providers.

use super::Node;
use std::sync::Arc;

/// Providers a chunk holds.
const CHUNK: usize = 1024;

/// Providers by index, copy-on-write per chunk.
#[derive(Clone, Default)]
pub struct Nodes {
    chunks: Vec<Arc<Vec<Arc<Node>>>>,
    len: usize,
}

impl Nodes {
    /// How many providers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Provider `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&Arc<Node>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    /// The providers in index order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Node>> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Appends a provider.
    pub fn push(&mut self, node: Arc<Node>) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(node),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(node);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }
}

impl std::ops::Index<usize> for Nodes {
    type Output = Arc<Node>;

    fn index(&self, i: usize) -> &Arc<Node> {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl std::ops::IndexMut<usize> for Nodes {
    /// Provider `i`, its chunk copied first when another snapshot shares it.
    fn index_mut(&mut self, i: usize) -> &mut Arc<Node> {
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }
}

impl FromIterator<Arc<Node>> for Nodes {
    fn from_iter<T: IntoIterator<Item = Arc<Node>>>(iter: T) -> Self {
        let mut nodes = Nodes::default();
        for n in iter {
            nodes.push(n);
        }
        nodes
    }
}

impl From<Vec<Arc<Node>>> for Nodes {
    fn from(v: Vec<Arc<Node>>) -> Self {
        v.into_iter().collect()
    }
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::snapshot::JsonUuid;

    fn node(id: i64) -> Arc<Node> {
        let uuid = uuid::Uuid::from_u128(u128::from(id.unsigned_abs()));
        Arc::new(Node {
            id,
            uuid,
            json_uuid: JsonUuid::of(uuid),
            parent: None,
            root: 0,
            traits: Vec::new(),
            aggs: Vec::new(),
            stock: Vec::new(),
            report: None,
            stamp: 0,
        })
    }

    #[test]
    fn a_copy_shares_every_chunk_but_the_one_changed() {
        let nodes: Nodes = (0..3000).map(node).collect();
        assert_eq!(nodes.len(), 3000);
        assert_eq!(nodes[2999].id, 2999);
        let mut copy = nodes.clone();
        Arc::make_mut(&mut copy[1500]).stamp = 7;
        assert_eq!((nodes[1500].stamp, copy[1500].stamp), (0, 7));
        let shared: Vec<bool> = nodes
            .chunks
            .iter()
            .zip(&copy.chunks)
            .map(|(a, b)| Arc::ptr_eq(a, b))
            .collect();
        assert_eq!(shared, [true, false, true]);
        assert_eq!(
            copy.iter().map(|n| n.id).sum::<i64>(),
            (0..3000i64).sum::<i64>()
        );
        assert!(copy.get(3000).is_none());
    }
}
