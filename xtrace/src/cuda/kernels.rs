//! Kernel names. `cudaLaunchKernel` receives the kernel's host stub, a function whose symbol is the
//! kernel's own (mangled) name: blazesym names it from the ELF symbols of the file it lies in.
//! Code built by nvcc 13 passes a `cudaKernel_t` handle instead, and `cuLaunchKernel` receives a
//! `CUfunction` or `CUkernel` handle: named by the `cuModuleGetFunction` / `cuLibraryGetKernel`
//! call that returned it, else by the host stub that keeps it ([`StubHandles`]). Unknown stubs are
//! shown as `module+0xoffset`, unknown handles as `cudaKernel_t 0x…` (runtime) or
//! `CUfunction 0x…` (driver), with the module whose code launched them first where that is not a
//! CUDA library itself: `(libcublasLt.so.13)`.
//! Addresses are resolved in the process image the call was made in ([`Images`]), so a process
//! gone by the time its launches are read is named from what it had mapped then.
//! Results are cached per process and address until the process loads a library.
use std::collections::HashMap;

use super::stub_handles::StubHandles;
use crate::{elf::symbolize::module_name, image::Images, procfs::merge_maps};

#[derive(Default)]
pub struct KernelNames {
    /// By process, image and address: a program its process exec'd may have code at the same.
    stubs: HashMap<(u32, u32, u64), String>,
    handles: HashMap<(u32, u64), String>,
    statics: StubHandles,
    /// What unknown driver handles are shown as, by the module of their first launch.
    unknown: HashMap<(u32, u64), String>,
}

impl KernelNames {
    /// A CUDA call of process `pid` was made at `ns`: its image is read now if it never was, while
    /// the process is most likely still alive, and kept after it exits.
    pub fn saw(&mut self, images: &mut Images, pid: u32, ns: u64) {
        images.seen(pid, ns);
    }

    /// Reads what naming `pid`'s kernels needs from the files it maps now (before the probes are
    /// attached: see [`StubHandles::prepare`]).
    /// The mappings are not kept: the process may load libraries before the probes and the side
    /// band that would say so are in place, so its image is read at its first CUDA call.
    pub fn prepare(&mut self, pid: u32) {
        let mut maps = Vec::new();
        merge_maps(&mut maps, pid);
        self.statics.prepare(pid, &maps);
    }

    /// Process `pid` loaded a library (its `dlopen` returned): a stub may now lie where another
    /// library's did (closed with `dlclose`), so the names found by address are found again.
    pub fn loaded(&mut self, images: &mut Images, pid: u32) {
        self.stubs.retain(|&(p, _, _), _| p != pid);
        self.unknown.retain(|&(p, _), _| p != pid);
        self.statics.forget(pid);
        images.loaded(pid);
    }

    /// The kernel whose host stub is at `address` in process `pid`, or whose handle `address` is;
    /// launched at `call.ns` from `call.caller` (a return address).
    pub fn stub(&mut self, images: &mut Images, call: Call, address: u64) -> String {
        let key = (call.pid, images.seen(call.pid, call.ns), address);
        if let Some(name) = self.stubs.get(&key) {
            return name.clone();
        }
        let name = self.symbolize(images, call, address);
        self.stubs.insert(key, name.clone());
        name
    }

    /// `KIND 0x…` for a handle no lookup or stub names, with the module that launched it: not a
    /// CUDA library itself (nvcc 13's stubs call libcudart's `__cudaLaunchKernel`, which calls
    /// `cudaLaunchKernel`; the runtime calls the driver).
    fn unknown(&mut self, images: &mut Images, kind: &str, call: Call, handle: u64) -> String {
        let module = (call.caller != 0)
            .then(|| images.mapping_at(call.pid, call.ns, call.caller))
            .flatten()
            .filter(|m| super::plan::library_of(std::path::Path::new(&m.path)).is_none())
            .map(|m| module_name(&m.path).to_string());
        match module {
            Some(module) => format!("{kind} {handle:#x} ({module})"),
            None => format!("{kind} {handle:#x}"),
        }
    }

    fn symbolize(&mut self, images: &mut Images, call: Call, address: u64) -> String {
        let Some(code) = images.code_at(call.pid, call.ns, address) else {
            // Not code: a `cudaKernel_t`.
            return match self.known_handle(images, call, address) {
                Some(name) => name,
                None => self.unknown(images, "cudaKernel_t", call, address),
            };
        };
        match code.function {
            Some((name, 0)) => name,
            // Inside a function rather than at its start: not a stub.
            Some((name, offset)) => format!("{name}+{offset:#x}"),
            None => code.in_module(),
        }
    }

    /// `handle` (a `CUfunction` or `CUkernel`) of process `pid` is the kernel `name`.
    pub fn name_handle(&mut self, pid: u32, handle: u64, name: String) {
        if handle != 0 && !name.is_empty() {
            self.handles.insert((pid, handle), name);
        }
    }

    /// The kernel of `handle`: from the lookup that returned it, else from the stub that keeps it.
    fn known_handle(&mut self, images: &mut Images, call: Call, handle: u64) -> Option<String> {
        if let Some(name) = self.handle_name(call.pid, handle) {
            return Some(name);
        }
        let image = images.seen(call.pid, call.ns);
        self.statics.name(call.pid, images.maps(image), handle)
    }

    /// The name of an earlier handle, if one was seen.
    pub fn handle_name(&self, pid: u32, handle: u64) -> Option<String> {
        self.handles.get(&(pid, handle)).cloned()
    }

    /// The kernel a `CUfunction` handle names, launched by `call`.
    pub fn handle(&mut self, images: &mut Images, call: Call, handle: u64) -> String {
        if let Some(name) = self.known_handle(images, call, handle) {
            return name;
        }
        if let Some(name) = self.unknown.get(&(call.pid, handle)) {
            return name.clone();
        }
        let name = self.unknown(images, "CUfunction", call, handle);
        self.unknown.insert((call.pid, handle), name.clone());
        name
    }
}

/// A launch whose kernel is named: by process `pid` at `ns`, from `caller` (a return address).
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub pid: u32,
    pub ns: u64,
    pub caller: u64,
}
