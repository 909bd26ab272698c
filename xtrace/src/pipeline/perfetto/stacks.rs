//! CPU samples as Perfetto call stacks: each sample is a `PerfSample` packet on its thread whose
//! call stack is interned with its frames (function name, mapping, pc relative to the mapping),
//! their mappings (by path; kernel frames under `[kernel.kallsyms]`) and function names, each
//! sent once, in the `InternedData` of the first packet that uses it.
use std::collections::HashMap;

use super::proto::{Callstack, Frame, InternedData, InternedString, Mapping};

/// The mapping kernel frames are under, as perf and Perfetto name it.
pub const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// One frame of a sampled stack: its function's name, the file it is in (or
/// [`KERNEL_MAPPING`]) and its pc relative to that file (a file offset; a kernel address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleFrame {
    pub name: String,
    pub module: String,
    pub rel_pc: u64,
}

/// The iids of interned strings, frames and call stacks of one sequence.
#[derive(Default)]
pub struct Stacks {
    function_names: HashMap<String, u64>,
    mapping_paths: HashMap<String, u64>,
    /// Mapping iid by path iid (one mapping per file).
    mappings: HashMap<u64, u64>,
    frames: HashMap<(u64, u64, u64), u64>,
    callstacks: HashMap<Vec<u64>, u64>,
}

/// The iid of `text` in `table`; a new one is added to `new`. Iids start at 1.
fn string_iid(table: &mut HashMap<String, u64>, text: &str, new: &mut Vec<InternedString>) -> u64 {
    if let Some(&iid) = table.get(text) {
        return iid;
    }
    let iid = table.len() as u64 + 1;
    table.insert(text.to_string(), iid);
    new.push(InternedString {
        iid: Some(iid),
        str: Some(text.as_bytes().to_vec()),
    });
    iid
}

impl Stacks {
    /// The iid of the call stack of `frames` (outermost first, as Perfetto lists them: "bottom
    /// frame first"), interning what is new into `new`.
    pub fn callstack(&mut self, frames: &[SampleFrame], new: &mut InternedData) -> u64 {
        let ids: Vec<u64> = frames.iter().map(|f| self.frame(f, new)).collect();
        if let Some(&iid) = self.callstacks.get(&ids) {
            return iid;
        }
        let iid = self.callstacks.len() as u64 + 1;
        new.callstacks.push(Callstack {
            iid: Some(iid),
            frame_ids: ids.clone(),
        });
        self.callstacks.insert(ids, iid);
        iid
    }

    fn frame(&mut self, f: &SampleFrame, new: &mut InternedData) -> u64 {
        let name = string_iid(&mut self.function_names, &f.name, &mut new.function_names);
        let path = string_iid(&mut self.mapping_paths, &f.module, &mut new.mapping_paths);
        let next_mapping = self.mappings.len() as u64 + 1;
        let mapping = *self.mappings.entry(path).or_insert_with(|| {
            new.mappings.push(Mapping {
                iid: Some(next_mapping),
                path_string_ids: vec![path],
            });
            next_mapping
        });
        let key = (name, mapping, f.rel_pc);
        if let Some(&iid) = self.frames.get(&key) {
            return iid;
        }
        let iid = self.frames.len() as u64 + 1;
        new.frames.push(Frame {
            iid: Some(iid),
            function_name_id: Some(name),
            mapping_id: Some(mapping),
            rel_pc: Some(f.rel_pc),
        });
        self.frames.insert(key, iid);
        iid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, module: &str, rel_pc: u64) -> SampleFrame {
        SampleFrame {
            name: name.into(),
            module: module.into(),
            rel_pc,
        }
    }

    #[test]
    fn frames_mappings_and_stacks_are_interned_once() {
        let mut stacks = Stacks::default();
        let mut new = InternedData::default();
        let main = frame("main", "/bin/app", 0x1000);
        let work = frame("work", "/bin/app", 0x1100);
        let read = frame("ksys_read", KERNEL_MAPPING, 0xffff_ffff_8100_0000);
        assert_eq!(stacks.callstack(&[main.clone(), work.clone()], &mut new), 1);
        assert_eq!(stacks.callstack(&[main.clone(), work.clone(), read], &mut new), 2);
        assert_eq!(stacks.callstack(&[main.clone(), work], &mut new), 1);
        assert_eq!(new.callstacks.len(), 2);
        assert_eq!(new.callstacks[1].frame_ids, [1, 2, 3]);
        assert_eq!(new.frames.len(), 3);
        assert_eq!(new.mappings.len(), 2, "/bin/app and the kernel's");
        assert_eq!(
            new.mapping_paths[1].str.as_deref(),
            Some(KERNEL_MAPPING.as_bytes())
        );
        assert_eq!(new.function_names.len(), 3);
        // The same function at another pc is another frame.
        let mut more = InternedData::default();
        stacks.callstack(&[main, frame("work", "/bin/app", 0x1104)], &mut more);
        assert_eq!((more.frames.len(), more.function_names.len()), (1, 0));
    }
}
