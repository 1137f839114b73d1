//! A memory cgroup of its own for a process under test, as a container's memory limit would
//! be: cgroup v2 (`memory.max`) or v1 (`memory.limit_in_bytes`), made below this process's own
//! cgroup and removed when dropped (its processes killed first). Nothing else of the machine
//! changes.

use std::path::{Path, PathBuf};

/// One memory cgroup with a limit.
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

/// This process's memory cgroup directory, and whether it is cgroup v2.
fn own_memory_cgroup() -> (PathBuf, bool) {
    let listing = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in listing.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            return (Path::new("/sys/fs/cgroup/memory").join(path), false);
        }
        if controllers.is_empty() && Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return (Path::new("/sys/fs/cgroup").join(path), true);
        }
    }
    panic!("no memory cgroup in /proc/self/cgroup:\n{listing}");
}

impl MemoryCgroup {
    /// A new cgroup `name` (made unique) limited to `limit` bytes of memory, swap included.
    pub fn new(name: &str, limit: u64) -> MemoryCgroup {
        let (parent, v2) = own_memory_cgroup();
        let dir = parent.join(format!("{name}-{}", super::random_suffix()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot make cgroup {}: {e}", dir.display()));
        let cgroup = MemoryCgroup { dir, v2 };
        if v2 {
            cgroup.write("memory.max", &limit.to_string());
            cgroup.write("memory.swap.max", "0");
        } else {
            cgroup.write("memory.limit_in_bytes", &limit.to_string());
            // Swap counts too where the kernel accounts for it.
            let memsw = cgroup.dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                cgroup.write("memory.memsw.limit_in_bytes", &limit.to_string());
            }
        }
        cgroup
    }

    /// Its directory (what [`super::Operator::start_confined`] takes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("cannot write {value} to {file}: {e}"));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_else(|e| panic!("cannot read {file}: {e}"))
    }

    /// The most memory its processes have used at once, in bytes.
    pub fn peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        self.read(file).trim().parse().unwrap()
    }

    /// How many times the kernel killed one of its processes for memory.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let text = self.read(file);
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// Whether the kernel reports OOM kills for this cgroup at all (older v1 kernels do not),
    /// so that a count of 0 means something.
    pub fn counts_oom_kills(&self) -> bool {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        self.read(file).lines().any(|l| l.starts_with("oom_kill "))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid])
                .status();
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        eprintln!("cgroup {} left behind", self.dir.display());
    }
}
