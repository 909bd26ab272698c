//! Kernel handles kept by nvcc's host stubs. Code built by nvcc 13 (unless `__NV_LEGACY_LAUNCH`
//! is defined) does not pass `cudaLaunchKernel` the stub's own address: each stub asks
//! `__cudaGetKernel` once for its kernel's `cudaKernel_t`, keeps it in a function-local static,
//! and launches with that handle. The statics are named in the file's symbol table,
//! `_ZZ<n>__device_stub__<the kernel's mangled name without its leading _><parameters>E8__handle`
//! (`_ZZL…` for a stub of internal linkage; PyTorch 2.11's libtorch_cuda.so has 21,495), so
//! reading their values out of the process names each handle, whenever its stub first ran:
//! before xtrace attached, too.
use std::{
    collections::{HashMap, HashSet},
    fs::File,
    os::unix::fs::FileExt,
    sync::Arc,
};

use object::{Object, ObjectSymbol};

use crate::{elf::ExecSegments, procfs::Mapping};

/// One file's handle statics.
#[derive(Debug, Default)]
struct Statics {
    /// Where its code lies in it, to place it in a mapping of its code.
    segments: ExecSegments,
    /// (file address of the static, the kernel's mangled name), by address.
    slots: Vec<(u64, String)>,
}

#[derive(Default)]
pub struct StubHandles {
    /// By file (device, inode); empty for files without stubs.
    files: HashMap<(u64, u64), Arc<Statics>>,
    /// Per process, the handles its stubs held at the last read: kernel names, demangled.
    found: HashMap<u32, HashMap<u64, String>>,
    /// Handles looked for since they were last read, and not found.
    missed: HashSet<(u32, u64)>,
}

/// Reads past this many bytes between a file's first and last static are made one static at a
/// time.
const SPAN_READ_LIMIT: u64 = 64 << 20;

impl StubHandles {
    /// The kernel whose stub keeps `handle` in process `pid` (whose executable mappings are
    /// `maps`). A handle first seen is looked for in the process again: the stub stored it before
    /// it launched with it. A handle not found then is not looked for again.
    pub fn name(&mut self, pid: u32, maps: &[Mapping], handle: u64) -> Option<String> {
        if handle == 0 {
            return None;
        }
        if let Some(name) = self.found.get(&pid).and_then(|found| found.get(&handle)) {
            return Some(name.clone());
        }
        if !self.missed.insert((pid, handle)) {
            return None;
        }
        let found = self.read(pid, maps);
        let name = found.get(&handle).cloned();
        self.found.insert(pid, found);
        name
    }

    /// Process `pid` exited or was replaced by an exec: its handles mean nothing any more.
    pub fn forget(&mut self, pid: u32) {
        self.found.remove(&pid);
        self.missed.retain(|&(p, _)| p != pid);
    }

    /// Reads the statics of the files `pid` maps now (`maps`), before its handles are looked for:
    /// a large file's symbol table takes a while (libtorch_cuda.so's ~0.1 s), better spent before
    /// the probes are attached than while the recording's events wait.
    pub fn prepare(&mut self, pid: u32, maps: &[Mapping]) {
        let mut files = HashSet::new();
        for mapping in maps {
            if mapping.file.is_some_and(|f| files.insert(f)) {
                self.file_statics(pid, mapping);
            }
        }
    }

    /// The statics of the file of `mapping` (of process `pid`), read at its first use. A file that
    /// could not be read (its process gone) is tried again for the next.
    fn file_statics(&mut self, pid: u32, mapping: &Mapping) -> Option<Arc<Statics>> {
        let file = mapping.file?;
        if let Some(known) = self.files.get(&file) {
            return Some(known.clone());
        }
        let read = std::time::Instant::now();
        let statics = mapping.open_path(pid).and_then(|p| statics(&p))?;
        log::debug!(
            "{}: {} host stub handles, read in {:?}",
            mapping.path,
            statics.slots.len(),
            read.elapsed()
        );
        Some(self.files.entry(file).or_insert(Arc::new(statics)).clone())
    }

    /// Every handle the stubs of `pid`'s files hold now.
    fn read(&mut self, pid: u32, maps: &[Mapping]) -> HashMap<u64, String> {
        let started = std::time::Instant::now();
        let mut found = self.found.remove(&pid).unwrap_or_default();
        let Ok(memory) = File::open(format!("/proc/{pid}/mem")) else {
            return found;
        };
        let mut files = HashSet::new();
        for mapping in maps {
            if !mapping.file.is_some_and(|f| files.insert(f)) {
                continue;
            }
            let Some(statics) = self.file_statics(pid, mapping).filter(|s| !s.slots.is_empty()) else {
                continue;
            };
            // `mapping`, the file's first in `maps`, is of its code (only such are kept).
            let Some(bias) = statics.segments.bias(mapping) else {
                continue;
            };
            for (handle, mangled) in held(&memory, bias, &statics.slots) {
                found
                    .entry(handle)
                    .or_insert_with(|| crate::demangle::demangle(mangled));
            }
        }
        log::debug!(
            "pid {pid}: {} kernel handles held by host stubs, read in {:?}",
            found.len(),
            started.elapsed()
        );
        found
    }
}

/// The non-zero handles among `slots` (file addresses; `bias` places them in the process): each
/// with its kernel's mangled name.
fn held<'s>(memory: &File, bias: u64, slots: &'s [(u64, String)]) -> Vec<(u64, &'s str)> {
    let (Some(first), Some(last)) = (slots.first(), slots.last()) else {
        return Vec::new();
    };
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap_or_default());
    let one = |at: u64| {
        let mut bytes = [0; 8];
        match memory.read_at(&mut bytes, at.wrapping_add(bias)) {
            Ok(8) => word(&bytes),
            _ => 0,
        }
    };
    // One read of the span from the first static to the last where it is not too long; a static
    // it did not reach (a hole in the mappings) is read alone.
    let span = (last.0 - first.0)
        .checked_add(8)
        .filter(|&s| s <= SPAN_READ_LIMIT);
    let mut bytes = vec![0; span.unwrap_or(0) as usize];
    let n = match span {
        Some(_) => memory
            .read_at(&mut bytes, first.0.wrapping_add(bias))
            .unwrap_or(0),
        None => 0,
    };
    let values = slots.iter().map(|&(at, _)| {
        let i = (at - first.0) as usize;
        match bytes.get(i..i + 8) {
            Some(value) if i + 8 <= n => word(value),
            _ => one(at),
        }
    });
    values
        .zip(slots)
        .filter(|(value, _)| *value != 0)
        .map(|(value, (_, mangled))| (value, mangled.as_str()))
        .collect()
}

/// The handle statics of the ELF file at `path` (empty for a file without stubs), None when it
/// cannot be read.
fn statics(path: &str) -> Option<Statics> {
    let data = crate::elf::Elf::map(path).ok()?;
    let Ok(elf) = data.parse() else {
        return Some(Statics::default());
    };
    // Only nvcc's output registers device code, from `.nvFatBinSegment`: other files' symbol
    // tables (libtorch_cpu.so's is large) are not read.
    if elf.section_by_name(".nvFatBinSegment").is_none() {
        return Some(Statics::default());
    }
    let segments = ExecSegments::of(&elf);
    if segments.is_empty() {
        return Some(Statics::default());
    }
    let mut slots: Vec<(u64, String)> = elf
        .symbols()
        // A static's eight bytes must end in the address space.
        .filter(|s| s.kind() == object::SymbolKind::Data && s.address() != 0 && s.address() < u64::MAX - 8)
        .filter_map(|s| Some((s.address(), kernel_of_static(s.name().ok()?)?)))
        .collect();
    slots.sort_unstable_by_key(|s| s.0);
    slots.dedup_by_key(|s| s.0);
    Some(Statics { segments, slots })
}

/// The name of the kernel whose stub's `__handle` static `symbol` names, or None for any other
/// symbol: mangled (`_Z…`), or as it is for a kernel of C linkage (`extern "C"`), whose stub is
/// `__device_stub__NAME`.
pub fn kernel_of_static(symbol: &str) -> Option<String> {
    let rest = symbol.strip_prefix("_ZZ")?;
    if !rest.ends_with("E8__handle") {
        return None;
    }
    let rest = rest.strip_prefix('L').unwrap_or(rest);
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let length: usize = rest[..digits].parse().ok()?;
    let stub = rest.get(digits..digits.checked_add(length)?)?;
    let kernel = stub.strip_prefix("__device_stub__").filter(|k| !k.is_empty())?;
    Some(match kernel.starts_with('Z') {
        true => format!("_{kernel}"),
        false => kernel.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_from_the_statics_of_libtorch_cuda() {
        // Symbols as `nm` lists them in PyTorch 2.11's libtorch_cuda.so (CUDA 13).
        assert_eq!(
            kernel_of_static(
                "_ZZ103__device_stub__ZN2at6native37search_end_matrix_indices_cuda_kernelEPllNS_4cuda6detail10TensorInfoIllEElPllRKN2at4cuda6detail10TensorInfoIllEElE8__handle"
            )
            .as_deref(),
            Some("_ZN2at6native37search_end_matrix_indices_cuda_kernelEPllNS_4cuda6detail10TensorInfoIllEEl")
        );
        let internal = kernel_of_static(
            "_ZZL120__device_stub__ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_iRN2at6native21CUDAFunctorOnSelf_addIfEERSt5arrayIPcLm2EEE8__handle",
        )
        .unwrap();
        assert_eq!(
            crate::demangle::demangle(&internal),
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)"
        );
        // The stub's other statics, and other functions' `__handle`s, are not kernels.
        for other in [
            "_ZGVZL120__device_stub__ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIaEESt5arrayIPcLm2EEEEviT0_T1_iRN2at6native21CUDAFunctorOnSelf_addIaEERSt5arrayIPcLm2EEE5__tmp",
            "_ZZ103__device_stub__ZN2at6native37search_end_matrix_indices_cuda_kernelEPllNS_4cuda6detail10TensorInfoIllEElPllRKN2at4cuda6detail10TensorInfoIllEElE3__f",
            "_ZZ4mainE8__handle",
            "_ZZ999__device_stub__Z1kvE8__handle",
            "_ZZ18446744073709551615__device_stub__Z1kvE8__handle",
            "_ZZ99999999999999999999999__device_stub__Z1kvE8__handle",
            "_ZZ15__device_stub__E8__handle",
        ] {
            assert_eq!(kernel_of_static(other), None, "{other}");
        }
        // A kernel of C linkage keeps its plain name.
        assert_eq!(
            kernel_of_static("_ZZ21__device_stub__vecAddPfS_S_iE8__handle").as_deref(),
            Some("vecAdd")
        );
    }

    /// This test's own statics stand in for a process's stubs: the values read are the handles.
    #[test]
    fn held_handles_are_read_from_the_process() {
        static A: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x5000);
        static B: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let memory = File::open("/proc/self/mem").unwrap();
        let (a, b) = (A.as_ptr() as u64, B.as_ptr() as u64);
        let mut slots = vec![(a, "_Z1av".to_string()), (b, "_Z1bv".to_string())];
        slots.sort_unstable_by_key(|s| s.0);
        assert_eq!(held(&memory, 0, &slots), vec![(0x5000, "_Z1av")]);
        B.store(0x6000, std::sync::atomic::Ordering::SeqCst);
        let mut found = held(&memory, 0, &slots);
        found.sort_unstable();
        assert_eq!(found, vec![(0x5000, "_Z1av"), (0x6000, "_Z1bv")]);
        // Statics too far apart for one read (here one on the stack) are read one at a time.
        let local = std::sync::atomic::AtomicU64::new(0x7000);
        let mut slots = vec![
            (a, "_Z1av".to_string()),
            (local.as_ptr() as u64, "_Z1cv".to_string()),
        ];
        slots.sort_unstable_by_key(|s| s.0);
        assert!(slots[1].0 - slots[0].0 > SPAN_READ_LIMIT);
        let mut found = held(&memory, 0, &slots);
        found.sort_unstable();
        assert_eq!(found, vec![(0x5000, "_Z1av"), (0x7000, "_Z1cv")]);
    }
}
