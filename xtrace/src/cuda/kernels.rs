//! Kernel names. `cudaLaunchKernel` receives the kernel's host stub, a function whose symbol is the
//! kernel's own (mangled) name: blazesym names it from the ELF symbols of the file it lies in.
//! Code built by nvcc 13 passes a `cudaKernel_t` handle instead, and `cuLaunchKernel` receives a
//! `CUfunction` or `CUkernel` handle: named by the `cuModuleGetFunction` / `cuLibraryGetKernel`
//! call that returned it, else by the host stub that keeps it ([`StubHandles`]). Unknown stubs are
//! shown as `module+0xoffset`, unknown handles as `cudaKernel_t 0x…` (runtime) or
//! `CUfunction 0x…` (driver), with the module whose code launched them first where that is not a
//! CUDA library itself: `(libcublasLt.so.13)`.
//! Results are cached per process and address until the process loads a library.
use std::collections::HashMap;

use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use super::stub_handles::StubHandles;
use crate::{
    demangle::demangle,
    elf::symbolize::{module_name, symbolize_elf, symbolizer},
    procfs::{find, merge_maps, Mapping},
};

pub struct KernelNames {
    symbolizer: Symbolizer,
    maps: HashMap<u32, Vec<Mapping>>,
    stubs: HashMap<(u32, u64), String>,
    handles: HashMap<(u32, u64), String>,
    statics: StubHandles,
    /// What unknown driver handles are shown as, by the module of their first launch.
    unknown: HashMap<(u32, u64), String>,
}

impl Default for KernelNames {
    fn default() -> Self {
        KernelNames {
            symbolizer: symbolizer(),
            maps: HashMap::new(),
            stubs: HashMap::new(),
            handles: HashMap::new(),
            statics: StubHandles::default(),
            unknown: HashMap::new(),
        }
    }
}

impl KernelNames {
    /// A CUDA call of process `pid` was seen: read its mappings now if they were never read, while
    /// it is most likely still alive (a process's mappings are gone once it has exited).
    pub fn saw(&mut self, pid: u32) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.maps.entry(pid) {
            merge_maps(slot.insert(Vec::new()), pid);
        }
    }

    /// Reads what naming `pid`'s kernels needs from the files it maps now (before the probes are
    /// attached: see [`StubHandles::prepare`]).
    /// The mappings are not kept: the process may load libraries before the probes that would
    /// say so are attached, so they are read again at its first CUDA call.
    pub fn prepare(&mut self, pid: u32) {
        let mut maps = Vec::new();
        merge_maps(&mut maps, pid);
        self.statics.prepare(pid, &maps);
    }

    /// Process `pid` loaded a library (its `dlopen` returned): a stub may now lie where another
    /// library's did (closed with `dlclose`), so the names found by address are found again.
    pub fn loaded(&mut self, pid: u32) {
        if self.maps.remove(&pid).is_some() {
            self.stubs.retain(|&(p, _), _| p != pid);
            self.unknown.retain(|&(p, _), _| p != pid);
            self.statics.forget(pid);
            self.saw(pid);
        }
    }

    /// The kernel whose host stub is at `address` in process `pid`, or whose handle `address` is;
    /// launched from `caller` (a return address).
    pub fn stub(&mut self, pid: u32, address: u64, caller: u64) -> String {
        if let Some(name) = self.stubs.get(&(pid, address)) {
            return name.clone();
        }
        let name = self.symbolize(pid, address, caller);
        self.stubs.insert((pid, address), name.clone());
        name
    }

    /// The mapping of `pid` that holds `address`, reading the mappings again if none does (a
    /// library loaded since the last read, or the first launch of this process).
    fn mapping(&mut self, pid: u32, address: u64) -> Option<&Mapping> {
        let known = self.maps.get(&pid).is_some_and(|m| find(m, address).is_some());
        if !known {
            merge_maps(self.maps.entry(pid).or_default(), pid);
        }
        self.maps.get(&pid).and_then(|m| find(m, address))
    }

    /// `KIND 0x…` for a handle no lookup or stub names, with the module that launched it: not a
    /// CUDA library itself (nvcc 13's stubs call libcudart's `__cudaLaunchKernel`, which calls
    /// `cudaLaunchKernel`; the runtime calls the driver).
    fn unknown(&mut self, kind: &str, pid: u32, handle: u64, caller: u64) -> String {
        let module = (caller != 0)
            .then(|| self.mapping(pid, caller))
            .flatten()
            .filter(|m| super::plan::library_of(std::path::Path::new(&m.path)).is_none())
            .map(|m| module_name(&m.path).to_string());
        match module {
            Some(module) => format!("{kind} {handle:#x} ({module})"),
            None => format!("{kind} {handle:#x}"),
        }
    }

    fn symbolize(&mut self, pid: u32, address: u64, caller: u64) -> String {
        let Some(mapping) = self.mapping(pid, address).cloned() else {
            // Not code: a `cudaKernel_t`.
            return match self.known_handle(pid, address) {
                Some(name) => name,
                None => self.unknown("cudaKernel_t", pid, address, caller),
            };
        };
        let offset = address - mapping.start + mapping.offset;
        let module = module_name(&mapping.path).to_string();
        if !mapping.path.starts_with('/') {
            return format!("{module}+{offset:#x}");
        }
        // Through the process's root (containers); once it has exited (or while it exits), by
        // the path itself.
        let root = format!("/proc/{pid}/root{}", mapping.path);
        for open in [root, mapping.path.clone()] {
            let found = symbolize_elf(&self.symbolizer, &open, Input::FileOffset(&[offset]));
            match found.map(|mut results| results.pop()) {
                Ok(Some(Symbolized::Sym(sym))) if sym.offset == 0 => return demangle(&sym.name),
                // Inside a function rather than at its start: not a stub.
                Ok(Some(Symbolized::Sym(sym))) => {
                    return format!("{}+{:#x}", demangle(&sym.name), sym.offset)
                }
                Ok(_) => break,
                Err(_) => continue,
            }
        }
        format!("{module}+{offset:#x}")
    }

    /// `handle` (a `CUfunction` or `CUkernel`) of process `pid` is the kernel `name`.
    pub fn name_handle(&mut self, pid: u32, handle: u64, name: String) {
        if handle != 0 && !name.is_empty() {
            self.handles.insert((pid, handle), name);
        }
    }

    /// The kernel of `handle`: from the lookup that returned it, else from the stub that keeps it.
    fn known_handle(&mut self, pid: u32, handle: u64) -> Option<String> {
        if let Some(name) = self.handle_name(pid, handle) {
            return Some(name);
        }
        let maps = self.maps.get(&pid).map_or(&[][..], Vec::as_slice);
        self.statics.name(pid, maps, handle)
    }

    /// The name of an earlier handle, if one was seen.
    pub fn handle_name(&self, pid: u32, handle: u64) -> Option<String> {
        self.handles.get(&(pid, handle)).cloned()
    }

    /// The kernel a `CUfunction` handle of process `pid` names, launched from `caller`.
    pub fn handle(&mut self, pid: u32, handle: u64, caller: u64) -> String {
        if let Some(name) = self.known_handle(pid, handle) {
            return name;
        }
        if let Some(name) = self.unknown.get(&(pid, handle)) {
            return name.clone();
        }
        let name = self.unknown("CUfunction", pid, handle, caller);
        self.unknown.insert((pid, handle), name.clone());
        name
    }
}
