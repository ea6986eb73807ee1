//! What the machine has, read from `/sys` and `/proc` (or copies of them,
//! `--sysfs-root` and `--procfs-root`): online CPUs with their cores and
//! NUMA cells, memory per cell, SR-IOV physical functions with their
//! virtual functions, and the CPU flags that are os-traits. Pure reading:
//! nothing here talks to the service.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One online CPU (a hardware thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpu {
    pub id: u32,
    /// The core it is a thread of, unique within its package.
    pub core: u32,
    pub package: u32,
}

/// One NUMA cell: its CPUs and memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub memory_mb: u64,
}

/// An SR-IOV physical function: its PCI address, cell and virtual functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalFunction {
    pub address: String,
    /// The cell it is attached to (`numa_node`; none when the firmware
    /// does not say, -1).
    pub cell: Option<u32>,
    pub total_vfs: u32,
}

/// The machine as found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Machine {
    pub cpus: Vec<Cpu>,
    /// Cells in id order; one cell holding every CPU where the kernel has
    /// no NUMA (no `node` folder).
    pub cells: Vec<Cell>,
    pub functions: Vec<PhysicalFunction>,
    /// os-traits names of the CPU's flags (`HW_CPU_X86_AVX2`, …), sorted.
    pub cpu_traits: Vec<String>,
}

/// Why the machine could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
}

/// Where the two trees are.
#[derive(Debug, Clone)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sysfs: PathBuf::from("/sys"),
            procfs: PathBuf::from("/proc"),
        }
    }
}

/// CPU flags (`/proc/cpuinfo`) and the os-traits they are.
const CPU_FLAG_TRAITS: &[(&str, &str)] = &[
    ("aes", "HW_CPU_X86_AESNI"),
    ("avx", "HW_CPU_X86_AVX"),
    ("avx2", "HW_CPU_X86_AVX2"),
    ("avx512f", "HW_CPU_X86_AVX512F"),
    ("avx512cd", "HW_CPU_X86_AVX512CD"),
    ("avx512bw", "HW_CPU_X86_AVX512BW"),
    ("avx512dq", "HW_CPU_X86_AVX512DQ"),
    ("avx512vl", "HW_CPU_X86_AVX512VL"),
    ("bmi1", "HW_CPU_X86_BMI"),
    ("bmi2", "HW_CPU_X86_BMI2"),
    ("fma", "HW_CPU_X86_FMA3"),
    ("mmx", "HW_CPU_X86_MMX"),
    ("sse", "HW_CPU_X86_SSE"),
    ("sse2", "HW_CPU_X86_SSE2"),
    ("ssse3", "HW_CPU_X86_SSSE3"),
    ("sse4_1", "HW_CPU_X86_SSE41"),
    ("sse4_2", "HW_CPU_X86_SSE42"),
    ("sha_ni", "HW_CPU_X86_SHA"),
    ("svm", "HW_CPU_X86_SVM"),
    ("vmx", "HW_CPU_X86_VMX"),
];

/// Reads the machine under `roots`.
pub fn discover(roots: &Roots) -> Result<Machine, DiscoveryError> {
    let cpu_dir = roots.sysfs.join("devices/system/cpu");
    let online = cpu_list(&read(&cpu_dir.join("online"))?, &cpu_dir.join("online"))?;
    let mut cpus = Vec::with_capacity(online.len());
    for id in online {
        let topology = cpu_dir.join(format!("cpu{id}/topology"));
        cpus.push(Cpu {
            id,
            core: number(&topology.join("core_id"))?,
            package: number(&topology.join("physical_package_id"))?,
        });
    }
    let cells = cells(&roots.sysfs, &cpus, &roots.procfs)?;
    Ok(Machine {
        functions: functions(&roots.sysfs)?,
        cpu_traits: cpu_traits(&roots.procfs.join("cpuinfo"))?,
        cpus,
        cells,
    })
}

fn cells(sysfs: &Path, cpus: &[Cpu], procfs: &Path) -> Result<Vec<Cell>, DiscoveryError> {
    let node_dir = sysfs.join("devices/system/node");
    let online = node_dir.join("online");
    if !online.exists() {
        // No NUMA: one cell with every CPU and the machine's memory.
        let meminfo = procfs.join("meminfo");
        return Ok(vec![Cell {
            id: 0,
            cpus: cpus.iter().map(|c| c.id).collect(),
            memory_mb: mem_total_kb(&read(&meminfo)?, &meminfo)? / 1024,
        }]);
    }
    let online_cpus: Vec<u32> = cpus.iter().map(|c| c.id).collect();
    let mut cells = Vec::new();
    for id in cpu_list(&read(&online)?, &online)? {
        let dir = node_dir.join(format!("node{id}"));
        let cpulist = dir.join("cpulist");
        let meminfo = dir.join("meminfo");
        cells.push(Cell {
            id,
            cpus: cpu_list(&read(&cpulist)?, &cpulist)?
                .into_iter()
                .filter(|c| online_cpus.contains(c))
                .collect(),
            memory_mb: mem_total_kb(&read(&meminfo)?, &meminfo)? / 1024,
        });
    }
    Ok(cells)
}

/// PCI devices with `sriov_totalvfs` above 0, in address order.
fn functions(sysfs: &Path) -> Result<Vec<PhysicalFunction>, DiscoveryError> {
    let dir = sysfs.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut found = BTreeMap::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let total = path.join("sriov_totalvfs");
        if !total.exists() {
            continue;
        }
        let total_vfs: u32 = number(&total)?;
        if total_vfs == 0 {
            continue;
        }
        let numa = path.join("numa_node");
        let cell = match read(&numa) {
            Ok(text) => text.trim().parse::<u32>().ok(),
            Err(_) => None,
        };
        let address = entry.file_name().to_string_lossy().into_owned();
        found.insert(
            address.clone(),
            PhysicalFunction {
                address,
                cell,
                total_vfs,
            },
        );
    }
    Ok(found.into_values().collect())
}

/// The os-traits of the flags every CPU has (the first CPU's line).
fn cpu_traits(cpuinfo: &Path) -> Result<Vec<String>, DiscoveryError> {
    let text = read(cpuinfo)?;
    let flags: Vec<&str> = text
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "flags").then_some(value)
        })
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default();
    let mut traits: Vec<String> = CPU_FLAG_TRAITS
        .iter()
        .filter(|(flag, _)| flags.contains(flag))
        .map(|(_, t)| (*t).to_string())
        .collect();
    traits.sort();
    Ok(traits)
}

fn read(path: &Path) -> Result<String, DiscoveryError> {
    std::fs::read_to_string(path).map_err(|source| DiscoveryError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn number<T: std::str::FromStr>(path: &Path) -> Result<T, DiscoveryError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| DiscoveryError::Format {
        path: path.to_path_buf(),
        what: format!("\"{}\" is not a number", text.trim()),
    })
}

/// The kernel's list form: `0-3,8,10-11`.
fn cpu_list(text: &str, path: &Path) -> Result<Vec<u32>, DiscoveryError> {
    let bad = || DiscoveryError::Format {
        path: path.to_path_buf(),
        what: format!("\"{}\" is not a CPU list", text.trim()),
    };
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// `MemTotal:` in kB, from `/proc/meminfo` or a node's `meminfo`
/// (`Node 0 MemTotal:  16777216 kB`).
fn mem_total_kb(text: &str, path: &Path) -> Result<u64, DiscoveryError> {
    text.lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            key.trim_end().ends_with("MemTotal").then(|| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })?
        })
        .ok_or_else(|| DiscoveryError::Format {
            path: path.to_path_buf(),
            what: "no MemTotal line".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_lists_read_as_it_writes_them() {
        let p = Path::new("x");
        assert_eq!(
            cpu_list("0-3,8,10-11\n", p).unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert!(cpu_list("3-1", p).is_err());
        assert!(cpu_list("a", p).is_err());
        assert_eq!(
            mem_total_kb(
                "Node 1 MemTotal:       16777216 kB\nNode 1 MemFree: 1 kB\n",
                p
            )
            .unwrap(),
            16_777_216
        );
    }

    #[test]
    fn the_seed_example_is_read_whole() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent/seed-node");
        let m = discover(&Roots {
            sysfs: root.join("sys"),
            procfs: root.join("proc"),
        })
        .unwrap();
        assert_eq!(m.cpus.len(), 16);
        assert_eq!(
            m.cells.iter().map(|c| c.cpus.len()).collect::<Vec<_>>(),
            [8, 8]
        );
        assert_eq!(m.cells.iter().map(|c| c.memory_mb).sum::<u64>(), 32_768);
        assert_eq!(
            m.functions
                .iter()
                .map(|f| (f.address.as_str(), f.cell, f.total_vfs))
                .collect::<Vec<_>>(),
            [("0000:3b:00.0", Some(0), 8), ("0000:af:00.0", Some(1), 2)]
        );
        assert!(m.cpu_traits.contains(&"HW_CPU_X86_AVX2".to_string()));
        assert!(!m.cpu_traits.contains(&"HW_CPU_X86_AVX512F".to_string()));
    }
}
