//! A capture's off-CPU time read back for `report` and `diff`: nanoseconds per wait (the leaf
//! frame of offcpu.folded, `[futex]`, `[read]`, `[runnable]` …) and per stack, from the whole
//! offcpu.folded; the contended locks from summary.json's `off_cpu.locks`.
use std::{collections::BTreeMap, path::Path};

use serde::Serialize;
use serde_json::Value;

use super::{capture::parse_folded, read_regular, Error, Result};

/// One lock as summary.json lists it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LockTime {
    /// Its name, or its address when it has none.
    pub lock: String,
    pub waits: u64,
    pub wait_ns: u64,
    /// The thread that released it most (`comm pid/tid`), if any.
    pub holder: Option<String>,
}

/// A capture's time off CPU.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct OffCpuTime {
    pub total_ns: u64,
    /// Nanoseconds per wait, by the wait's name (`futex`, `runnable` …).
    pub by_wait: BTreeMap<String, u64>,
    /// The stacks that waited longest, folded with their wait as the leaf: (stack, ns).
    pub top_stacks: Vec<(String, u64)>,
    pub locks: Vec<LockTime>,
}

/// Stacks kept in [`OffCpuTime::top_stacks`].
const TOP_STACKS: usize = 10;

/// The off-CPU time of the capture in `dir` whose summary.json is `summary`; None when it was
/// recorded without `--off-cpu` (no offcpu.folded).
pub fn load(dir: &Path, summary: &Value) -> Result<Option<OffCpuTime>> {
    let path = dir.join(crate::output::OFFCPU_FOLDED);
    let bytes = match read_regular(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Unreadable {
                path,
                reason: e.to_string(),
            })
        }
    };
    let stacks = parse_folded(&String::from_utf8_lossy(&bytes)).map_err(|reason| Error::Malformed {
        path: path.clone(),
        reason,
    })?;
    let mut time = OffCpuTime::default();
    for (stack, ns) in &stacks {
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        let wait = leaf
            .strip_prefix('[')
            .and_then(|w| w.strip_suffix(']'))
            .unwrap_or(leaf);
        *time.by_wait.entry(wait.to_string()).or_default() += ns;
        time.total_ns += ns;
    }
    let mut top: Vec<(String, u64)> = stacks;
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP_STACKS);
    time.top_stacks = top;
    time.locks = locks(summary);
    Ok(Some(time))
}

fn locks(summary: &Value) -> Vec<LockTime> {
    let listed = summary.pointer("/off_cpu/locks").and_then(Value::as_array);
    let lock = |l: &Value| {
        let address = l.get("address")?.as_str()?;
        let holder = l.pointer("/holders/0").and_then(|h| {
            let id = |k: &str| h.get(k).and_then(Value::as_u64).unwrap_or(0);
            Some(format!(
                "{} {}/{}",
                h.get("comm")?.as_str()?,
                id("pid"),
                id("tid")
            ))
        });
        Some(LockTime {
            lock: l
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or(address)
                .to_string(),
            waits: l.get("waits")?.as_u64()?,
            wait_ns: l.get("wait_ns")?.as_u64()?,
            holder,
        })
    };
    listed.into_iter().flatten().filter_map(lock).collect()
}

/// How the waits of two captures compare: (wait, base ns, new ns), largest first.
pub fn compare(base: &OffCpuTime, new: &OffCpuTime) -> Vec<(String, u64, u64)> {
    let mut waits: Vec<&String> = base.by_wait.keys().chain(new.by_wait.keys()).collect();
    waits.sort();
    waits.dedup();
    let ns = |t: &OffCpuTime, w: &str| t.by_wait.get(w).copied().unwrap_or(0);
    let mut rows: Vec<(String, u64, u64)> = waits
        .into_iter()
        .map(|w| (w.clone(), ns(base, w), ns(new, w)))
        .collect();
    rows.sort_by(|a, b| b.1.max(b.2).cmp(&a.1.max(a.2)).then_with(|| a.0.cmp(&b.0)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_and_locks_of_a_capture() {
        let dir = std::env::temp_dir().join(format!("xtrace-analysis-offcpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("offcpu.folded"),
            "app;main;wait;[futex] 300\napp;main;[runnable] 5\napp;t;sleep;[clock_nanosleep] 200\napp;main;wait2;[futex] 100\n",
        )
        .unwrap();
        let summary = serde_json::json!({"off_cpu": {"locks": [
            {"address": "0x10", "name": "lock", "waits": 2, "wait_ns": 400,
             "holders": [{"pid": 1, "tid": 2, "comm": "holder"}]},
            {"address": "0x20", "name": null, "waits": 1, "wait_ns": 3, "holders": []}
        ]}});
        let time = load(&dir, &summary).unwrap().unwrap();
        assert_eq!(time.total_ns, 605);
        assert_eq!(time.by_wait["futex"], 400);
        assert_eq!(time.top_stacks[0], ("app;main;wait;[futex]".to_string(), 300));
        assert_eq!(time.locks[0].holder.as_deref(), Some("holder 1/2"));
        assert_eq!(time.locks[1].lock, "0x20");
        let mut other = time.clone();
        other.by_wait.insert("read".into(), 50);
        let rows = compare(&time, &other);
        assert_eq!(rows[0], ("futex".to_string(), 400, 400));
        assert!(rows.contains(&("read".to_string(), 0, 50)));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(load(&dir, &summary).unwrap(), None);
    }
}
