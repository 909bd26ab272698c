//! uprobe_multi links (Linux 6.6+): one BPF link attaches one program to many offsets of one file,
//! each with its own cookie, and detaching it waits for the kernel's uprobe grace periods once per
//! link instead of once per uprobe (perf-event uprobes take ~0.1 s each to close).
//!
//! aya 0.14 cannot load a program with the `BPF_TRACE_UPROBE_MULTI` expected attach type, so this
//! module loads the named programs itself: it parses the embedded object with aya-obj, points the
//! map references at the maps aya already created, and issues `BPF_PROG_LOAD` and `BPF_LINK_CREATE`.
use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

use aya::{maps::Map, Ebpf};
use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_prog_type, BPF_F_UPROBE_MULTI_RETURN};

use super::{
    attr::{bpf_fd, LinkCreateAttr, ProgLoadAttr},
    uprobe_program::UprobeProgram,
    OBJECT,
};
use crate::error::{Error, Result};

/// A kernel program loaded for uprobe_multi links. Closing it (drop) unloads it once no link
/// holds it.
#[derive(Debug)]
pub struct MultiProgram {
    program: UprobeProgram,
    fd: OwnedFd,
}

/// An attached uprobe_multi link; dropping it detaches every uprobe of the link.
#[derive(Debug)]
pub struct MultiLink(#[allow(dead_code)] OwnedFd);

/// Where one link attaches: offsets in one file with a cookie each, for one process or all.
pub struct MultiTarget<'a> {
    pub path: &'a Path,
    pub offsets: &'a [u64],
    pub cookies: &'a [u64],
    /// Reference-counter (semaphore) offsets, one per offset, or none.
    pub ref_ctr_offsets: Option<&'a [u64]>,
    /// Only this process (tgid); `None` for every process that maps the file.
    pub pid: Option<u32>,
    /// Return probes instead of entry probes.
    pub ret: bool,
}

/// The file descriptor of a map aya created.
fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    let data = match map {
        Map::Array(d)
        | Map::PerCpuArray(d)
        | Map::HashMap(d)
        | Map::PerCpuHashMap(d)
        | Map::LruHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::RingBuf(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd())
}

/// Loads `programs` of the embedded object for uprobe_multi links, using the maps of `ebpf`
/// (which must still hold every map the programs use).
pub fn load(ebpf: &Ebpf, programs: &[UprobeProgram]) -> Result<Vec<MultiProgram>> {
    let invalid = |what: String| Error::io("preparing uprobe_multi programs", io::Error::other(what));
    let mut obj = aya_obj::Object::parse(OBJECT).map_err(|e| invalid(e.to_string()))?;
    // relocate_maps borrows the object mutably, so the map definitions are taken out of it.
    let definitions = std::mem::take(&mut obj.maps);
    let mut maps = Vec::new();
    for (name, definition) in &definitions {
        let map = ebpf
            .map(name)
            .ok_or_else(|| invalid(format!("map {name} was not created")))?;
        let fd = map_fd(map).ok_or_else(|| invalid(format!("map {name} has an unexpected type")))?;
        maps.push((name.as_str(), fd.as_raw_fd(), definition));
    }
    let text_sections = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_maps(maps.into_iter(), &text_sections)
        .map_err(|e| invalid(e.to_string()))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| invalid(e.to_string()))?;
    programs
        .iter()
        .map(|&role| {
            let name = role.name();
            let program = obj
                .programs
                .get(name)
                .ok_or_else(|| invalid(format!("program {name} is missing from the object")))?;
            let function = &obj.functions[&program.function_key()];
            // `#[uprobe(sleepable)]` programs (section `uprobe.s`) may fault pages in.
            let sleepable = matches!(
                program.section,
                aya_obj::ProgramSection::UProbe { sleepable: true }
            );
            let flags = if sleepable {
                super::features::BPF_F_SLEEPABLE
            } else {
                0
            };
            let fd = load_one(name, &function.instructions, &program.license, flags)
                .map_err(|e| Error::io(format!("loading {name} for uprobe_multi links"), e))?;
            Ok(MultiProgram { program: role, fd })
        })
        .collect()
}

/// `BPF_PROG_LOAD` of one kprobe-type program with the uprobe_multi expected attach type and
/// `flags` (`BPF_F_SLEEPABLE`). On a
/// verifier rejection the load is repeated with a log, whose last lines join the error. The
/// verifier gives up with EAGAIN when a signal is pending (a SIGTERM during the load): the load
/// is then repeated, the signal having been handled in between, and the session sees it once
/// attached.
fn load_one(
    name: &str,
    insns: &[aya_obj::generated::bpf_insn],
    license: &CString,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = ProgLoadAttr {
        prog_flags: flags,
        prog_type: bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32,
        ..Default::default()
    };
    for (dst, src) in attr.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src;
    }
    let mut tries = 0;
    let error = loop {
        match bpf_fd(bpf_cmd::BPF_PROG_LOAD, &attr) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 5 => tries += 1,
            Err(e) => break e,
        }
    };
    let mut log = vec![0u8; 1 << 20];
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    if let Ok(fd) = bpf_fd(bpf_cmd::BPF_PROG_LOAD, &attr) {
        return Ok(fd); // the first failure passed (a signal once more)
    }
    let text = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(io::Error::new(
        error.kind(),
        format!("{error}; verifier: {}", tail.join(" | ")),
    ))
}

impl MultiProgram {
    pub fn program(&self) -> UprobeProgram {
        self.program
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Attaches this program at every offset of `target` in one link.
    pub fn attach(&self, target: &MultiTarget) -> io::Result<MultiLink> {
        let path = CString::new(target.path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        if target.offsets.len() != target.cookies.len()
            || target
                .ref_ctr_offsets
                .is_some_and(|r| r.len() != target.offsets.len())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "offsets, cookies and reference counters differ in number",
            ));
        }
        let attr = LinkCreateAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            attach_type: bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32,
            path: path.as_ptr() as u64,
            offsets: target.offsets.as_ptr() as u64,
            ref_ctr_offsets: target.ref_ctr_offsets.map_or(0, |r| r.as_ptr() as u64),
            cookies: target.cookies.as_ptr() as u64,
            cnt: target.offsets.len() as u32,
            multi_flags: if target.ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 },
            pid: target.pid.unwrap_or(0),
            ..Default::default()
        };
        bpf_fd(bpf_cmd::BPF_LINK_CREATE, &attr).map(MultiLink)
    }
}
