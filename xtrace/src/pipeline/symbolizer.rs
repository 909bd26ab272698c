//! The in-capture symbolizer: names every frame of the sampled stacks and of the off-CPU waits
//! while the processes they were taken in may still be alive. User frames are named by file
//! offset through the image model's symbols (`crate::image::symbols`: ELF symbols and DWARF of
//! each mapped file), PLT stubs as `NAME@plt` (`elf::plt`), code without a symbol by its unwind
//! entry (`elf::fde`, as `module+0xOFFSET`), code outside any file from the vDSO's symbols or a
//! JIT's `/tmp/perf-PID.map`; kernel frames through kallsyms (blazesym), suffixed `_[k]`; Python
//! frames stitched in place of the eval loop's. The CPU profile, the off-CPU waits, the flight
//! recorder's windows and the live view all name their stacks through one [`Resolver`].
use std::collections::{BTreeMap, HashMap, HashSet};

use blazesym::symbolize::{
    source::{Kernel, Source},
    Input, Symbolized, Symbolizer,
};

use crate::{
    elf::{
        fde, plt,
        symbolize::{module_name, symbolizer},
    },
    image::Images,
    pipeline::{
        bpf_symbols::BpfSymbols,
        perfetto::{SampleFrame, KERNEL_MAPPING},
        samples::{find_jit, read_perf_map, stack_hash, JitSymbol, Samples, StackKey},
        writer::TimelineSample,
    },
    procfs::{find, Mapping},
    python::Python,
};

/// Where a user address lies in a file: (file to open, file offset, module name shown).
type FilePlace = (String, u64, String);

/// Names every frame of every sampled stack: file offsets through the image model's symbols
/// ([`crate::image::symbols`]), kernel addresses through kallsyms. Made once per recording: the
/// CPU samples and the off-CPU waits are named by the same one, so kallsyms and the vDSO are
/// read once.
pub struct Resolver {
    /// For kernel addresses.
    symbolizer: Symbolizer,
    vdso: Vec<(u64, u64, String)>,
}

/// The address to symbolize for frame `index`: return addresses (every frame but the interrupted
/// one) point after their call, so one byte back lands in the calling function.
fn lookup_address(index: usize, address: u64) -> u64 {
    if index == 0 {
        address
    } else {
        address.saturating_sub(1)
    }
}

/// The names of `results`, demangled, None for addresses without one.
fn sym_names(results: Vec<Symbolized<'_>>) -> Vec<Option<String>> {
    results
        .into_iter()
        .map(|r| match r {
            Symbolized::Sym(sym) => Some(crate::demangle::demangle(&sym.name)),
            Symbolized::Unknown(_) => None,
        })
        .collect()
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver {
            // Kernel addresses have no debug files to look for.
            symbolizer: symbolizer(&Default::default()),
            vdso: vdso_symbols(),
        }
    }
}

impl Resolver {
    /// Symbol names of kernel addresses, None for those it cannot name; an address in a BPF
    /// program of `bpf` by that program.
    fn kernel_names(&self, addresses: &[u64], bpf: Option<&BpfSymbols>) -> Vec<Option<String>> {
        let source = Source::Kernel(Kernel::default());
        let names = match self.symbolizer.symbolize(&source, Input::AbsAddr(addresses)) {
            Ok(results) => sym_names(results),
            Err(_) => vec![None; addresses.len()],
        };
        addresses
            .iter()
            .zip(names)
            .map(|(&a, name)| bpf.and_then(|b| b.find(a)).map(str::to_string).or(name))
            .collect()
    }

    /// The name of an address outside any mapped file: a vDSO function, a JIT symbol, the name of
    /// a special mapping (`[uprobes]`: the return probes' trampoline), or the bare address.
    fn unfiled(&self, maps: &[Mapping], address: u64, jit: &[JitSymbol]) -> String {
        // A caller frame is looked up one byte before its return address, so that it falls in the
        // call: a return into the trampoline, the first byte of `[uprobes]`, falls before it.
        let special = find(maps, address)
            .or_else(|| {
                let next = address.checked_add(1)?;
                find(maps, next)
                    .filter(|m| m.start == next && m.path == crate::pipeline::samples::TRAMPOLINES)
            })
            .filter(|m| m.path.starts_with('['));
        match special {
            Some(vdso) if vdso.path == "[vdso]" => {
                let offset = address - vdso.start;
                self.vdso
                    .iter()
                    .find(|(start, size, _)| offset >= *start && offset < start + size)
                    .map_or_else(|| format!("[vdso]+{offset:#x}"), |(_, _, name)| name.clone())
            }
            // A JIT may name its anonymous mappings (`[anon:NAME]`): its perf map comes first.
            _ => match (find_jit(jit, address), special) {
                (Some(symbol), _) => symbol.name.clone(),
                (None, Some(mapping)) => mapping.path.clone(),
                (None, None) => format!("{address:#x}"),
            },
        }
    }

    /// Frame names (outermost first) of every stack of `samples`, kernel frames suffixed `_[k]`,
    /// Python frames (named by `python`) in place of the eval-loop frames that ran them; blazesym
    /// caches per file offset and address.
    pub fn frames<'s>(&self, samples: &'s Samples, images: &mut Images, python: &Python) -> Frames<'s> {
        let keys: Vec<&StackKey> = samples.stacks.keys().collect();
        self.frames_of(&keys, samples.bpf.as_ref(), images, python)
    }

    /// Frame names, as [`Resolver::frames`] gives them, of the stacks `keys` only: the live view
    /// names each second's new stacks so while their processes live, through the same bounded
    /// cache of file offsets' names (`images.symbols`) the end of the capture uses.
    pub fn frames_of<'s>(
        &self,
        keys: &[&'s StackKey],
        bpf: Option<&BpfSymbols>,
        images: &mut Images,
        python: &Python,
    ) -> Frames<'s> {
        // User frames: (image, its mappings then, address) → (file to open, file offset, shown
        // module).
        let mut by_file: BTreeMap<String, HashSet<u64>> = BTreeMap::new();
        let mut kernel: HashSet<u64> = HashSet::new();
        let mut places: HashMap<(u32, u32, u64), Option<FilePlace>> = HashMap::new();
        for &key in keys {
            let maps = mapped_then(images, key);
            for (i, &address) in key.user.iter().enumerate() {
                let address = lookup_address(i, address);
                places.entry((key.image, key.mapped, address)).or_insert_with(|| {
                    // Only file-backed code has symbols to read; the rest ([vdso], JIT) is None.
                    let mapping = find(maps, address).filter(|m| m.path.starts_with('/'))?;
                    let offset = address - mapping.start + mapping.offset;
                    // A file gone with its process: named by file and offset (see `open_path`).
                    let open = images.open_path(key.pid, mapping).unwrap_or_default();
                    if !open.is_empty() {
                        by_file.entry(open.clone()).or_default().insert(offset);
                    }
                    Some((open, offset, module_name(&mapping.path).to_string()))
                });
            }
            for (i, &address) in key.kernel.iter().enumerate() {
                kernel.insert(lookup_address(i, address));
            }
        }
        let mut file_names: HashMap<(String, u64), String> = HashMap::new();
        for (path, offsets) in &by_file {
            let offsets: Vec<u64> = offsets.iter().copied().collect();
            let names: Vec<Option<String>> = images
                .symbols
                .functions(path, &offsets)
                .into_iter()
                .map(|f| f.map(|f| f.name))
                .collect();
            // A PLT stub has no symbol: the one before it (`_init`) would name it. Unwind entries
            // are read only for files with offsets no symbol names; one read of the ELF serves both.
            let unnamed = names.iter().any(Option::is_none);
            let (stubs, functions) = crate::elf::read_elf(path, |elf| {
                let functions = if unnamed { fde::functions(elf) } else { Vec::new() };
                (plt::stubs(elf), functions)
            });
            for (offset, name) in offsets.iter().zip(names) {
                let name = plt::find(&stubs, *offset)
                    .map(|s| s.name.clone())
                    .or(name)
                    .or_else(|| fde::find(&functions, *offset).map(|f| fde::name(f, module_name(path))));
                if let Some(name) = name {
                    file_names.insert((path.clone(), *offset), name);
                }
            }
        }
        // JIT code: anonymous memory named by the process's /tmp/perf-PID.map.
        let mut jit: HashMap<u32, Vec<JitSymbol>> = HashMap::new();
        for &key in keys {
            jit.entry(key.pid).or_insert_with(|| read_perf_map(key.pid));
        }
        let kernel: Vec<u64> = kernel.into_iter().collect();
        let kernel_names: HashMap<u64, String> = kernel
            .iter()
            .zip(self.kernel_names(&kernel, bpf))
            .map(|(a, name)| (*a, name.unwrap_or_else(|| format!("{a:#x}"))))
            .collect();

        keys.iter()
            .map(|&key| {
                let mut frames: Vec<String> = key
                    .user
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, &address)| {
                        let address = lookup_address(i, address);
                        match &places[&(key.image, key.mapped, address)] {
                            Some((open, offset, module)) => file_names
                                .get(&(open.clone(), *offset))
                                .cloned()
                                .unwrap_or_else(|| format!("{module}+{offset:#x}")),
                            None => self.unfiled(mapped_then(images, key), address, &jit[&key.pid]),
                        }
                    })
                    .collect();
                frames.extend(
                    key.kernel
                        .iter()
                        .enumerate()
                        .rev()
                        .map(|(i, &address)| format!("{}_[k]", kernel_names[&lookup_address(i, address)])),
                );
                let frames = python.stitch(frames, &key.python);
                (key, frames)
            })
            .collect()
    }
}

/// The vDSO's function symbols as (offset in the image, size, name), read from xtrace's own vDSO
/// (the kernel maps the same image into every process).
fn vdso_symbols() -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectSymbol};
    let Some(image) = crate::elf::own_vdso() else {
        return Vec::new();
    };
    let Ok(file) = image.parse() else {
        return Vec::new();
    };
    let base = file.relative_address_base();
    file.dynamic_symbols()
        .filter(|s| s.is_definition() && s.size() > 0)
        .filter_map(|s| {
            Some((
                s.address().wrapping_sub(base),
                s.size(),
                s.name().ok()?.to_string(),
            ))
        })
        .collect()
}

/// The mappings `key`'s image had when the sample was taken.
fn mapped_then<'i>(images: &'i Images, key: &StackKey) -> &'i [crate::procfs::Mapping] {
    let maps = images.maps(key.image);
    &maps[..(key.mapped as usize).min(maps.len())]
}

/// Frame names (outermost first, kernel frames suffixed `_[k]`) of every sampled stack.
pub type Frames<'s> = HashMap<&'s StackKey, Vec<String>>;

/// Frames of a stack shown per sample on the timeline, innermost kept.
const TIMELINE_FRAMES: usize = 32;

/// Writes the timeline samples on their threads: in trace.json as instant events
/// (`"cat":"sample"`, named by the innermost frame, `args.stack` the innermost frames folded), in
/// a Perfetto trace as samples with their whole call stacks.
pub fn timeline<W: std::io::Write>(
    trace: &mut crate::pipeline::writer::EventWriter<W>,
    samples: &Samples,
    frames: &Frames,
    images: &Images,
) -> std::io::Result<()> {
    let by_hash: HashMap<u64, TimelineSample> = frames
        .iter()
        .map(|(key, frames)| (stack_hash(key), timeline_sample(key, frames, images)))
        .collect();
    for s in &samples.timeline {
        if let Some(sample) = by_hash.get(&s.stack) {
            trace.sample(s.pid, s.tid, s.ts_ns, sample)?;
        }
    }
    Ok(())
}

/// What the timeline shows of each sample of stack `key`, named `frames`.
pub fn timeline_sample(key: &StackKey, frames: &[String], images: &Images) -> TimelineSample {
    let start = frames.len().saturating_sub(TIMELINE_FRAMES);
    TimelineSample {
        leaf: frames.last().map_or("?", String::as_str).to_string(),
        folded: frames[start..].join(";"),
        frames: sample_frames(key, frames, images),
    }
}

/// The frames of `key` for a Perfetto call stack, outermost first: named as in stacks.folded
/// (`names`), user frames with the file they are in and their offset there, kernel frames under
/// [`KERNEL_MAPPING`] at their address.
fn sample_frames(key: &StackKey, names: &[String], images: &Images) -> Vec<SampleFrame> {
    let maps = mapped_then(images, key);
    let users = key.user.len();
    names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            if j < users {
                let i = users - 1 - j;
                let address = lookup_address(i, key.user[i]);
                let (module, rel_pc) = match find(maps, address) {
                    Some(m) if !m.path.is_empty() => (m.path.clone(), address - m.start + m.offset),
                    _ => ("[unknown]".to_string(), address),
                };
                SampleFrame {
                    name: name.clone(),
                    module,
                    rel_pc,
                }
            } else {
                let i = names.len() - 1 - j;
                SampleFrame {
                    name: name.strip_suffix("_[k]").unwrap_or(name).to_string(),
                    module: KERNEL_MAPPING.to_string(),
                    rel_pc: key.kernel.get(i).map_or(0, |&a| lookup_address(i, a)),
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::parse_maps;

    #[test]
    fn addresses_outside_files_are_named_by_their_mapping() {
        let maps = parse_maps(
            "\
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [anon:jit]
7fffffffe000-7ffffffff000 r-xp 00000000 00:00 0 [uprobes]
",
        );
        let jit = [JitSymbol {
            start: 0x7f00_0000_0100,
            size: 0x10,
            name: "jitted".into(),
        }];
        let resolver = Resolver::default();
        let name = |address| resolver.unfiled(&maps, address, &jit);
        assert_eq!(name(0x7fff_ffff_e00d), "[uprobes]");
        // A return into the trampoline, looked up one byte before it.
        assert_eq!(name(0x7fff_ffff_dfff), "[uprobes]");
        assert_eq!(name(0x7fff_ffff_dffe), "0x7fffffffdffe");
        assert_eq!(name(u64::MAX), "0xffffffffffffffff");
        // A JIT's perf map names code in its named anonymous mapping; the rest takes the name.
        assert_eq!(name(0x7f00_0000_0104), "jitted");
        assert_eq!(name(0x7f00_0000_0200), "[anon:jit]");
        assert_eq!(name(0x1234), "0x1234");
    }
}
