//! User stacks of code built without frame pointers, unwound in user space with framehop from the
//! registers and stack bytes a sample carries (`--user-stack`) and the CFI (`.eh_frame` with its
//! `.eh_frame_hdr`, or `.debug_frame`) of the modules the process maps. Where a module has no CFI
//! (JIT code, a file that cannot be read) framehop follows the frame pointer instead, except in
//! CPython's perf trampolines, which `trampolines` steps over by their known stack layout.
//!
//! Each file's unwind sections are read once (only those sections, not the whole file) and shared
//! by every process that maps it; the vDSO's come from xtrace's own, the same kernel's image.
mod trampolines;

use std::{collections::HashMap, io::Read, ops::Range, os::unix::fs::MetadataExt, sync::Arc};

use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    Error as UnwindError, ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder,
};
use object::{Object, ObjectSection};
use xtrace_common::event::{MAX_FRAMES, USER_BP, USER_IP, USER_SP};

use crate::{elf::ExecSegments, procfs::Mapping};

/// Section bytes shared by every module made from one file.
type Bytes = Arc<[u8]>;

/// The unwind sections of one ELF file and where its executable segments lie in it.
#[derive(Debug, Default)]
struct FileUnwind {
    text_svma: Option<Range<u64>>,
    got_svma: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    segments: ExecSegments,
    /// Signal-return trampolines (glibc's `__restore_rt`): the code ranges whose `.eh_frame`
    /// entries are marked as signal frames (augmentation `S`).
    signal_frames: Vec<Range<u64>>,
}

/// The address ranges of the `.eh_frame` entries (at address `at`) that describe signal frames.
fn signal_frames(at: u64, eh_frame: &[u8]) -> Vec<Range<u64>> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    let section = EhFrame::new(eh_frame, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(at);
    let mut signal_cies = Vec::new();
    let mut found = Vec::new();
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        match entry {
            CieOrFde::Cie(cie) if cie.is_signal_trampoline() => signal_cies.push(cie.offset()),
            CieOrFde::Cie(_) => {}
            CieOrFde::Fde(partial) if signal_cies.contains(&partial.cie_offset().0) => {
                if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                    found.push(fde.initial_address()..fde.end_address());
                }
            }
            CieOrFde::Fde(_) => {}
        }
    }
    found
}

/// The most bytes a compressed unwind section is inflated to.
const MAX_INFLATED: u64 = 256 << 20;

/// A section's bytes, inflated when it is zlib-compressed (`SHF_COMPRESSED`, as `go build` writes
/// `.debug_frame`, or a GNU `.zdebug_` section); None for another compression (zstd) or bytes
/// that do not inflate.
fn section_bytes<'d>(section: &impl ObjectSection<'d>) -> Option<std::borrow::Cow<'d, [u8]>> {
    let compressed = section.compressed_data().ok()?;
    match compressed.format {
        object::CompressionFormat::None => Some(std::borrow::Cow::Borrowed(compressed.data)),
        object::CompressionFormat::Zlib if compressed.uncompressed_size <= MAX_INFLATED => {
            let mut inflated = Vec::with_capacity(compressed.uncompressed_size as usize);
            flate2::read::ZlibDecoder::new(compressed.data)
                .take(compressed.uncompressed_size)
                .read_to_end(&mut inflated)
                .ok()?;
            (inflated.len() as u64 == compressed.uncompressed_size)
                .then_some(std::borrow::Cow::Owned(inflated))
        }
        _ => None,
    }
}

impl FileUnwind {
    fn parse<'d, R: object::ReadRef<'d>>(file: &object::File<'d, R>) -> FileUnwind {
        let range = |name: &str| {
            let section = file.section_by_name(name)?;
            Some(section.address()..section.address().checked_add(section.size())?)
        };
        let bytes = |name: &str| -> Option<Bytes> {
            let data = section_bytes(&file.section_by_name(name)?)?;
            (!data.is_empty()).then(|| Arc::from(&*data))
        };
        let with_range = |name: &str| Some((range(name)?, bytes(name)?));
        let segments = ExecSegments::of(file);
        let eh_frame = with_range(".eh_frame");
        let signal_frames = eh_frame
            .as_ref()
            .map(|(range, bytes)| signal_frames(range.start, bytes))
            .unwrap_or_default();
        FileUnwind {
            text_svma: range(".text"),
            got_svma: range(".got"),
            eh_frame,
            eh_frame_hdr: with_range(".eh_frame_hdr"),
            debug_frame: bytes(".debug_frame"),
            segments,
            signal_frames,
        }
    }

    /// Reads the unwind sections of the file at `path`, only those sections.
    fn read(path: &str) -> Option<FileUnwind> {
        let lazy = crate::elf::LazyElf::open(path).ok()?;
        Some(FileUnwind::parse(&lazy.parse().ok()?))
    }

    /// The unwind sections of the vDSO, read from xtrace's own mapping of it (the kernel maps the
    /// same image into every process).
    fn vdso() -> Option<FileUnwind> {
        let image = crate::elf::own_vdso()?;
        Some(FileUnwind::parse(&image.parse().ok()?))
    }

    /// The framehop module for `mapping` of this file: the mapping's start corresponds to its file
    /// offset, which lies in one executable segment, whose address fixes the load bias.
    fn module(&self, mapping: &Mapping) -> Option<Module<Bytes>> {
        let base_avma = self.segments.bias(mapping)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, d)| d.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
            debug_frame: self.debug_frame.clone(),
            ..Default::default()
        };
        Some(Module::new(
            mapping.path.clone(),
            mapping.start..mapping.end,
            base_avma,
            info,
        ))
    }
}

/// A user stack unwound from a sample's copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    /// The interrupted instruction, then return addresses, innermost first (below a signal
    /// frame, the trampoline's first instruction and the code the signal interrupted, each one
    /// byte on: they are named as return addresses are, from the byte before).
    pub frames: Vec<u64>,
    /// The walk needed stack beyond the copy (or hit `MAX_FRAMES`): outer frames are missing.
    pub truncated: bool,
}

/// The modules known for one process image.
struct Process {
    unwinder: UnwinderX86_64<Bytes>,
    /// How many of the image's mappings were turned into modules (mappings are only appended).
    added: usize,
    /// Where its signal-return trampolines lie.
    signal_frames: Vec<Range<u64>>,
}

/// Unwinders for every sampled process image, and the files their modules come from.
pub struct Unwinders {
    files: HashMap<String, Option<Arc<FileUnwind>>>,
    processes: HashMap<u32, Process>,
    cache: CacheX86_64,
    /// CPython's perf trampolines, which have no CFI.
    trampolines: trampolines::Trampolines,
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders {
            files: HashMap::new(),
            processes: HashMap::new(),
            cache: CacheX86_64::new(),
            trampolines: Default::default(),
        }
    }
}

impl std::fmt::Debug for Unwinders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinders")
            .field("files", &self.files.len())
            .field("processes", &self.processes.len())
            .finish()
    }
}

impl Unwinders {
    /// Unwinds a sample of process `pid` in `image`, whose executable mappings are `maps`, from
    /// its user-mode registers and `stack`, the bytes copied from its stack pointer up.
    pub fn unwind(
        &mut self,
        image: u32,
        pid: u32,
        maps: &[Mapping],
        regs: [u64; 3],
        stack: &[u8],
    ) -> Unwound {
        self.sync(image, pid, maps);
        let Some(process) = self.processes.get(&image) else {
            return Unwound::default();
        };
        let (ip, sp) = (regs[USER_IP], regs[USER_SP]);
        let stack_end = sp + stack.len() as u64;
        let mut read_stack = |address: u64| {
            let at = address.checked_sub(sp).ok_or(())? as usize;
            let word = stack.get(at..at + 8).ok_or(())?;
            Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, regs[USER_BP]);
        let mut frame = FrameAddress::from_instruction_pointer(ip);
        let mut unwound = Unwound {
            frames: vec![ip],
            truncated: false,
        };
        loop {
            let trampoline = match frame {
                FrameAddress::ReturnAddress(at) => {
                    self.trampolines
                        .step((pid, maps), at.get(), &regs, &mut read_stack)
                }
                FrameAddress::InstructionPointer(_) => None,
            };
            let next = match trampoline {
                Some((caller, caller_regs)) => {
                    regs = caller_regs;
                    Ok(Some(caller))
                }
                None => process
                    .unwinder
                    .unwind_frame(frame, &mut regs, &mut self.cache, &mut read_stack),
            };
            let next = match next {
                Ok(Some(return_address)) => return_address,
                Ok(None) => break,
                // Past the end of the copy: the stack is deeper than `--user-stack`. Other errors
                // end a walk at a frame without CFI whose frame pointer leads nowhere.
                Err(UnwindError::CouldNotReadStack(at)) => {
                    unwound.truncated = at >= stack_end;
                    break;
                }
                Err(_) => break,
            };
            if unwound.frames.len() == MAX_FRAMES {
                unwound.truncated = true;
                break;
            }
            let trampoline = process.signal_frames.iter().any(|r| r.contains(&next));
            // Every frame after the first is named from the byte before it, as a return address
            // points after its call; a handler returns to the trampoline's first instruction, and
            // the interrupted code's address is exact: each is kept one byte on.
            unwound.frames.push(next + u64::from(trampoline));
            if trampoline {
                // A signal handler returns into the signal-return trampoline; the interrupted
                // code's registers are in the signal frame the kernel wrote above it (framehop
                // cannot follow the trampoline's CFI, an expression).
                let Some(interrupted) = signal_context(regs.sp(), &mut read_stack) else {
                    unwound.truncated = true;
                    break;
                };
                if unwound.frames.len() == MAX_FRAMES {
                    unwound.truncated = true;
                    break;
                }
                unwound.frames.push(interrupted.ip() + 1);
                frame = FrameAddress::from_instruction_pointer(interrupted.ip());
                regs = interrupted;
                continue;
            }
            match FrameAddress::from_return_address(next) {
                Some(address) => frame = address,
                None => break,
            }
        }
        unwound
    }

    /// Makes modules of the mappings of `image` (of process `pid`) not seen before.
    fn sync(&mut self, image: u32, pid: u32, maps: &[Mapping]) {
        let process = self.processes.entry(image).or_insert_with(|| Process {
            unwinder: UnwinderX86_64::new(),
            added: 0,
            signal_frames: Vec::new(),
        });
        for mapping in maps.iter().skip(process.added) {
            let file = if mapping.path == "[vdso]" {
                self.files
                    .entry(mapping.path.clone())
                    .or_insert_with(|| FileUnwind::vdso().map(Arc::new))
                    .clone()
            } else if mapping.path.starts_with('/') {
                // Files are told apart by device and inode: one path can name different files in
                // different mount namespaces.
                mapping.open_path(pid).and_then(|open| {
                    let key = std::fs::metadata(&open)
                        .map(|m| format!("{}:{}", m.dev(), m.ino()))
                        .unwrap_or_else(|_| open.clone());
                    self.files
                        .entry(key)
                        .or_insert_with(|| FileUnwind::read(&open).map(Arc::new))
                        .clone()
                })
            } else {
                None
            };
            let Some(file) = file else { continue };
            if let (Some(base), false) = (file.segments.bias(mapping), file.signal_frames.is_empty()) {
                let placed = file.signal_frames.iter().map(|r| r.start + base..r.end + base);
                process
                    .signal_frames
                    .extend(placed.filter(|r| mapping.start <= r.start && r.end <= mapping.end));
            }
            if let Some(module) = file.module(mapping) {
                process.unwinder.add_module(module);
            }
        }
        process.added = maps.len();
    }
}

/// The registers of the code a signal interrupted, from the signal frame at `frame` (the stack
/// pointer as the handler returned into the trampoline: `struct rt_sigframe`'s `uc`, whose
/// `uc_mcontext` (`struct sigcontext`) follows `uc_flags`, `uc_link` and `uc_stack`, 40 bytes).
fn signal_context(frame: u64, read: &mut impl FnMut(u64) -> Result<u64, ()>) -> Option<UnwindRegsX86_64> {
    const MCONTEXT: u64 = 40;
    let (bp, sp, ip) = (MCONTEXT + 10 * 8, MCONTEXT + 15 * 8, MCONTEXT + 16 * 8);
    let at = |offset: u64| frame.checked_add(offset);
    let (ip, sp, bp) = (read(at(ip)?).ok()?, read(at(sp)?).ok()?, read(at(bp)?).ok()?);
    Some(UnwindRegsX86_64::new(ip, sp, bp))
}

#[cfg(test)]
mod tests {
    use std::{
        fs::File,
        io::{Seek, SeekFrom},
    };

    use super::*;

    #[test]
    fn load_bias_from_the_segment_holding_the_mapping() {
        let file = FileUnwind {
            // A PIE whose text segment starts at file offset 0x1120, address 0x2120.
            segments: ExecSegments(vec![(0x1120, 0x3000, 0x2120)]),
            ..Default::default()
        };
        let mapping = Mapping {
            start: 0x5555_5555_6000,
            end: 0x5555_5555_9000,
            offset: 0x1000,
            path: "/bin/app".into(),
            deleted: false,
            file: None,
        };
        let module = file.module(&mapping).expect("the segment holds offset 0x1000");
        // File offset 0x1000 is address 0x2000: the file's address 0 is mapped 0x2000 below start.
        assert_eq!(module.base_avma(), 0x5555_5555_4000);
        assert_eq!(module.avma_range(), 0x5555_5555_6000..0x5555_5555_9000);
        let elsewhere = Mapping {
            offset: 0x8000,
            ..mapping
        };
        assert!(file.module(&elsewhere).is_none());
    }

    /// The registers of this thread at a point inside `capture`, and its stack from there up to
    /// 16 KiB or the end of the stack's mapping, read through /proc/self/mem.
    #[inline(never)]
    fn capture() -> ([u64; 3], Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, touches no memory.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags)
            );
        }
        let end = crate::procfs::own_all_maps()
            .unwrap()
            .iter()
            .find(|m| m.start <= sp && sp < m.end)
            .expect("the stack pointer is in a mapping")
            .end;
        let mut stack = vec![0; (end - sp).min(16384) as usize];
        let mut mem = File::open("/proc/self/mem").unwrap();
        mem.seek(SeekFrom::Start(sp)).unwrap();
        mem.read_exact(&mut stack).unwrap();
        ([ip, sp, bp], std::hint::black_box(stack))
    }

    #[inline(never)]
    fn middle() -> ([u64; 3], Vec<u8>) {
        std::hint::black_box(capture())
    }

    #[inline(never)]
    fn outer() -> ([u64; 3], Vec<u8>) {
        std::hint::black_box(middle())
    }

    #[test]
    fn unwinds_this_thread_through_its_callers() {
        let (regs, stack) = outer();
        let pid = std::process::id();
        let maps = crate::procfs::own_maps().unwrap();
        let mut unwinders = Unwinders::default();
        let unwound = unwinders.unwind(0, pid, &maps, regs, &stack);
        assert!(!unwound.truncated, "{unwound:?}");
        assert_eq!(unwound.frames[0], regs[USER_IP]);
        // Return addresses just after the calls in middle and outer (each well under 1 KiB long).
        let within = |f: fn() -> ([u64; 3], Vec<u8>), address: u64| {
            let start = f as usize as u64;
            (start..start + 1024).contains(&address)
        };
        assert!(within(middle, unwound.frames[1]), "{unwound:x?}");
        assert!(within(outer, unwound.frames[2]), "{unwound:x?}");
        assert!(
            unwound.frames.len() > 4,
            "the walk goes on into the test harness: {unwound:x?}"
        );

        // 256 bytes copied: the walk stops early, with the same inner frames, as truncated.
        let short = unwinders.unwind(0, pid, &maps, regs, &stack[..256]);
        assert!(
            short.truncated && short.frames.len() < unwound.frames.len(),
            "{short:x?}"
        );
        assert_eq!(short.frames[..], unwound.frames[..short.frames.len()]);
    }
}
