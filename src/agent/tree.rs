//! The provider tree a machine publishes, as Placement's nested model has
//! it: the node at the root (its CPU traits), one provider per NUMA cell
//! (its CPUs as VCPU, its memory as MEMORY_MB), one per SR-IOV physical
//! function under its cell (its virtual functions as inventory of the
//! configured class). The flat layout keeps the CPUs and memory on the
//! node (as Nova does, and as colocation's usage reports need them).
//! Pure: the machine in, the tree out.

use super::discovery::{Cell, Machine};
use crate::config::TreeLayout;
use crate::types::Inventory;
use std::collections::BTreeMap;

/// What the operator sets about the tree.
#[derive(Debug, Clone)]
pub struct TreeSettings {
    /// The node's provider name (the host's name by default).
    pub name: String,
    /// The class of a physical function's virtual functions.
    pub vf_class: String,
    /// Memory kept for the host, taken from the first cell's inventory.
    pub reserved_memory_mb: u64,
    pub cpu_allocation_ratio: f64,
    pub memory_allocation_ratio: f64,
    /// Where VCPU and MEMORY_MB go.
    pub layout: TreeLayout,
}

/// One provider of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub name: String,
    /// Index of the parent in the tree (parents come first).
    pub parent: Option<usize>,
    pub inventories: BTreeMap<String, Inventory>,
    pub traits: Vec<String>,
}

/// A count as an inventory's units: Placement takes at most 2^31 − 1
/// (2 PiB of memory in MB), so a larger count is published as that.
fn units(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// VCPU and MEMORY_MB of some CPUs and memory; `reserved_mb` of the
/// memory kept for the host.
fn cpus_and_memory(
    cpus: usize,
    memory_mb: u64,
    reserved_mb: u64,
    s: &TreeSettings,
) -> BTreeMap<String, Inventory> {
    let mut inventories = BTreeMap::new();
    if cpus > 0 {
        inventories.insert(
            "VCPU".to_string(),
            Inventory {
                allocation_ratio: s.cpu_allocation_ratio,
                ..Inventory::whole(units(u64::try_from(cpus).unwrap_or(u64::MAX)))
            },
        );
    }
    if memory_mb > 0 {
        inventories.insert(
            "MEMORY_MB".to_string(),
            Inventory {
                reserved: units(reserved_mb.min(memory_mb)),
                allocation_ratio: s.memory_allocation_ratio,
                ..Inventory::whole(units(memory_mb))
            },
        );
    }
    inventories
}

/// The tree, parents before children.
pub fn tree(machine: &Machine, s: &TreeSettings) -> Vec<Wanted> {
    let mut out = vec![Wanted {
        name: s.name.clone(),
        parent: None,
        inventories: BTreeMap::new(),
        traits: machine.cpu_traits.clone(),
    }];
    let mut cell_index = BTreeMap::new();
    match s.layout {
        TreeLayout::Flat => {
            let cpus = machine.cells.iter().map(|c| c.cpus.len()).sum();
            let memory = machine.cells.iter().map(|c| c.memory_mb).sum();
            out[0].inventories = cpus_and_memory(cpus, memory, s.reserved_memory_mb, s);
        }
        TreeLayout::Nested => {
            for (i, cell) in machine.cells.iter().enumerate() {
                cell_index.insert(cell.id, out.len());
                out.push(cell_provider(i, cell, s));
            }
        }
    }
    for f in &machine.functions {
        let parent = f
            .cell
            .and_then(|c| cell_index.get(&c).copied())
            .unwrap_or(0);
        out.push(Wanted {
            name: format!("{}_{}", s.name, f.address),
            parent: Some(parent),
            inventories: BTreeMap::from([(
                s.vf_class.clone(),
                Inventory::whole(units(u64::from(f.total_vfs))),
            )]),
            traits: Vec::new(),
        });
    }
    out
}

/// A NUMA cell's provider: its CPUs and memory (the host's memory
/// reserved on the first cell).
fn cell_provider(i: usize, cell: &Cell, s: &TreeSettings) -> Wanted {
    let reserved = if i == 0 { s.reserved_memory_mb } else { 0 };
    Wanted {
        name: format!("{}_NUMA{}", s.name, cell.id),
        parent: Some(0),
        inventories: cpus_and_memory(cell.cpus.len(), cell.memory_mb, reserved, s),
        traits: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::discovery::{Cell, Machine, PhysicalFunction};
    use super::*;

    #[test]
    fn cells_hold_cpus_and_memory_and_functions_hang_under_their_cell() {
        let m = Machine {
            cpus: Vec::new(),
            cells: vec![
                Cell {
                    id: 0,
                    cpus: vec![0, 1],
                    memory_mb: 1024,
                },
                Cell {
                    id: 1,
                    cpus: vec![2, 3],
                    memory_mb: 2048,
                },
            ],
            functions: vec![
                PhysicalFunction {
                    address: "0000:af:00.0".into(),
                    cell: Some(1),
                    total_vfs: 2,
                },
                PhysicalFunction {
                    address: "0000:01:00.0".into(),
                    cell: None,
                    total_vfs: 4,
                },
            ],
            cpu_traits: vec!["HW_CPU_X86_AVX2".into()],
        };
        let s = TreeSettings {
            name: "n".into(),
            vf_class: "SRIOV_NET_VF".into(),
            reserved_memory_mb: 512,
            cpu_allocation_ratio: 1.0,
            memory_allocation_ratio: 1.0,
            layout: TreeLayout::Nested,
        };
        let t = tree(&m, &s);
        let names: Vec<(&str, Option<usize>)> =
            t.iter().map(|w| (w.name.as_str(), w.parent)).collect();
        assert_eq!(
            names,
            [
                ("n", None),
                ("n_NUMA0", Some(0)),
                ("n_NUMA1", Some(0)),
                ("n_0000:af:00.0", Some(2)),
                ("n_0000:01:00.0", Some(0))
            ]
        );
        assert_eq!(t[1].inventories["MEMORY_MB"].reserved, 512);
        assert_eq!(t[2].inventories["MEMORY_MB"].reserved, 0);
        assert_eq!(t[3].inventories["SRIOV_NET_VF"].total, 2);
        assert_eq!(t[0].traits, ["HW_CPU_X86_AVX2"]);
        let flat = tree(
            &m,
            &TreeSettings {
                layout: TreeLayout::Flat,
                ..s
            },
        );
        let names: Vec<(&str, Option<usize>)> =
            flat.iter().map(|w| (w.name.as_str(), w.parent)).collect();
        assert_eq!(
            names,
            [
                ("n", None),
                ("n_0000:af:00.0", Some(0)),
                ("n_0000:01:00.0", Some(0))
            ]
        );
        assert_eq!(flat[0].inventories["VCPU"].total, 4);
        assert_eq!(flat[0].inventories["MEMORY_MB"].total, 3072);
        assert_eq!(flat[0].inventories["MEMORY_MB"].reserved, 512);
    }
}
