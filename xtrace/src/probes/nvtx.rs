//! NVTX v2 exported functions (`--nvtx` on a process that maps `libnvToolsExt.so*`, or
//! `libnvtx3interop.so*` which exports the same names) without xtrace's tool library: a process
//! started without `NVTX_INJECTION64_PATH` can still be traced. Each function's entry is a call
//! site of the USDT program, whose arguments are read as the tool library's `xtrace:*` probes
//! give them (source, domain, name, id), so the hits become ranges the same way.
//!
//! Without an NVTX tool loaded, libnvToolsExt hands out NULL domain and registered-string handles
//! and 0 for every start/end range id: domain ranges are recorded in the default domain, a message
//! given as a registered string is unnamed, and an end closes the process's oldest open start
//! range (`pipeline::ranges`).
use std::{os::unix::ffi::OsStrExt, path::Path};

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

use super::{
    elf::{ElfSymbols, FunctionSymbol, SymbolCache},
    ranges::{is_tool, NVTX_ENV},
    uprobe::Plan,
    usdt::{
        args::parse_args,
        plan::{kernel_form, Role, SiteAttachment, UsdtProbe},
        spec::{RangeOp, UsdtArgType},
    },
    ProbeInfo,
};
use crate::{
    error::Result,
    probes::spec::ArgType,
    target::{Process, TargetFile},
};

/// Whether `path` is a library that exports the NVTX v2 functions.
pub fn is_v2(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libnvToolsExt") || n.starts_with("libnvtx3interop"))
}

const NOTE: UsdtArgType = UsdtArgType::Note;
const STR: UsdtArgType = UsdtArgType::As(ArgType::Str);
const WIDE: UsdtArgType = UsdtArgType::Wide;
const fn message(type_arg: u8) -> UsdtArgType {
    UsdtArgType::Message { type_arg }
}

/// One traced function: what a call does, its arguments in USDT operand form (the x86-64 argument
/// registers at entry; an event attributes struct has its message type at offset 32 and its
/// message at 40), and how each is read. The first argument is the source (`SOURCE_NVTX`).
struct Function {
    name: &'static str,
    op: RangeOp,
    args: &'static str,
    types: &'static [UsdtArgType],
}

const fn f(name: &'static str, op: RangeOp, args: &'static str, types: &'static [UsdtArgType]) -> Function {
    Function {
        name,
        op,
        args,
        types,
    }
}

/// Argument layouts, as the tool library's probes have them: push and mark (source, domain, name),
/// start (source, domain, name, id), pop (source, domain), end (source, id), thread name (source,
/// tid, name). A message read from event attributes is followed by its type.
const FUNCTIONS: &[Function] = &[
    f(
        "nvtxRangePushA",
        RangeOp::Push,
        "8@$2 8@$0 8@%rdi",
        &[NOTE, STR, STR],
    ),
    f(
        "nvtxRangePushW",
        RangeOp::Push,
        "8@$2 8@$0 8@%rdi",
        &[NOTE, STR, WIDE],
    ),
    f(
        "nvtxRangePushEx",
        RangeOp::Push,
        "8@$2 8@$0 8@40(%rdi) -4@32(%rdi)",
        &[NOTE, STR, message(3), NOTE],
    ),
    f("nvtxRangePop", RangeOp::Pop, "8@$2 8@$0", &[NOTE, STR]),
    f(
        "nvtxRangeStartA",
        RangeOp::Start,
        "8@$2 8@$0 8@%rdi 8@$0",
        &[NOTE, STR, STR, NOTE],
    ),
    f(
        "nvtxRangeStartW",
        RangeOp::Start,
        "8@$2 8@$0 8@%rdi 8@$0",
        &[NOTE, STR, WIDE, NOTE],
    ),
    f(
        "nvtxRangeStartEx",
        RangeOp::Start,
        "8@$2 8@$0 8@40(%rdi) 8@$0 -4@32(%rdi)",
        &[NOTE, STR, message(4), NOTE, NOTE],
    ),
    f("nvtxRangeEnd", RangeOp::End, "8@$2 8@%rdi", &[NOTE, NOTE]),
    f("nvtxMarkA", RangeOp::Mark, "8@$2 8@$0 8@%rdi", &[NOTE, STR, STR]),
    f("nvtxMarkW", RangeOp::Mark, "8@$2 8@$0 8@%rdi", &[NOTE, STR, WIDE]),
    f(
        "nvtxMarkEx",
        RangeOp::Mark,
        "8@$2 8@$0 8@40(%rdi) -4@32(%rdi)",
        &[NOTE, STR, message(3), NOTE],
    ),
    f(
        "nvtxDomainRangePushEx",
        RangeOp::Push,
        "8@$2 8@$0 8@40(%rsi) -4@32(%rsi)",
        &[NOTE, STR, message(3), NOTE],
    ),
    f("nvtxDomainRangePop", RangeOp::Pop, "8@$2 8@$0", &[NOTE, STR]),
    f(
        "nvtxDomainRangeStartEx",
        RangeOp::Start,
        "8@$2 8@$0 8@40(%rsi) 8@$0 -4@32(%rsi)",
        &[NOTE, STR, message(4), NOTE, NOTE],
    ),
    f("nvtxDomainRangeEnd", RangeOp::End, "8@$2 8@%rsi", &[NOTE, NOTE]),
    f(
        "nvtxDomainMarkEx",
        RangeOp::Mark,
        "8@$2 8@$0 8@40(%rsi) -4@32(%rsi)",
        &[NOTE, STR, message(3), NOTE],
    ),
    f(
        "nvtxNameOsThreadA",
        RangeOp::ThreadName,
        "8@$2 4@%rdi 8@%rsi",
        &[NOTE, NOTE, STR],
    ),
    f(
        "nvtxNameOsThreadW",
        RangeOp::ThreadName,
        "8@$2 4@%rdi 8@%rsi",
        &[NOTE, NOTE, WIDE],
    ),
];

/// Whether `process` was started with xtrace's tool library as its NVTX tool: then libnvToolsExt
/// forwards every call to it, and its own probes see them. The variable may name it through a
/// symbolic link, or relative to the process's working directory.
fn injects_tool(process: &Process) -> bool {
    let environ = crate::procfs::environ(process.pid);
    let prefix = format!("{NVTX_ENV}=");
    environ
        .split(|&b| b == 0)
        .filter_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map(|value| Path::new(std::ffi::OsStr::from_bytes(value)))
        .any(|value| is_tool(value) || is_tool_link(process.pid, value))
}

/// Whether `value`, as process `pid` sees it (from its root, or its working directory), is a
/// link to xtrace's tool library.
fn is_tool_link(pid: u32, value: &Path) -> bool {
    let seen = match value.strip_prefix("/") {
        Ok(inside) => Path::new(&format!("/proc/{pid}/root")).join(inside),
        Err(_) => Path::new(&format!("/proc/{pid}/cwd")).join(value),
    };
    std::fs::canonicalize(seen).is_ok_and(|file| is_tool(&file))
}

/// Adds a site on every NVTX v2 function of every NVTX v2 library among `mapped`, the files of
/// `process` (scope `scope`), unless its NVTX calls reach the tool library. Returns how many
/// libraries were found.
pub fn plan(
    plan: &mut Plan,
    elves: &mut SymbolCache,
    process: &Process,
    mapped: &[TargetFile],
    scope: usize,
) -> Result<usize> {
    let found: Vec<&TargetFile> = mapped.iter().filter(|f| is_v2(&f.shown)).collect();
    if found.is_empty() || injects_tool(process) {
        return Ok(0);
    }
    for &file in &found {
        let (symbols, _) = elves.get(file)?;
        let opened = std::fs::File::open(&file.open).ok();
        for function in FUNCTIONS {
            let Some(symbol) = symbols.functions.iter().find(|s| s.name == function.name) else {
                continue;
            };
            let (id, added) = plan.probe_at(ProbeInfo {
                name: function.name.into(),
                kind: super::ProbeKind::Nvtx,
                target: file.shown.display().to_string(),
                offset: symbol.probe_offset,
                capture: Default::default(),
            });
            if added {
                plan.usdt_probes.insert(
                    id,
                    UsdtProbe {
                        role: Role::Range(function.op),
                        types: function.types.to_vec(),
                        end_name: None,
                    },
                );
            }
            let (mut site, signed) = site(function);
            site.probe_id = id;
            if let Some((slot, lo, hi)) = opened.as_ref().and_then(|f| init_guard(symbols, symbol, f)) {
                (site.guard_slot, site.guard_lo, site.guard_hi) = (slot, lo, hi);
            }
            plan.usdt_sites.push(SiteAttachment {
                file: file.clone(),
                offset: symbol.probe_offset,
                ref_ctr_offset: 0,
                scope,
                site,
                signed,
            });
        }
    }
    Ok(found.len())
}

/// The guard of an NVTX v2 function's site (see `UsdtSite::guard_slot`), relative to the probed
/// address: its code pointer, found from its first instructions (`lea d(%rip),%rax; mov
/// (%rax),%rax`, or `mov d(%rip),%rax`), and the file's code. Until the process's first NVTX call
/// the pointer leads into the library's initialisation, which jumps back to the function once it
/// has set every pointer (to the tool's functions, or NULL): that first pass is no call. None when
/// the function starts otherwise (another build of the library).
fn init_guard(
    symbols: &ElfSymbols,
    symbol: &FunctionSymbol,
    file: &std::fs::File,
) -> Option<(i64, i64, i64)> {
    use std::os::unix::fs::FileExt;
    let mut bytes = [0u8; 16];
    file.read_exact_at(&mut bytes, symbol.probe_offset).ok()?;
    let at = symbol.address + (symbol.probe_offset - symbol.file_offset);
    let mut decoder = Decoder::with_ip(64, &bytes, at, DecoderOptions::NONE);
    let first = decoder.decode();
    let slot = match first.mnemonic() {
        // `lea d(%rip),%reg` then `mov (%reg),%reg`.
        Mnemonic::Lea if first.is_ip_rel_memory_operand() => {
            let second = decoder.decode();
            let loads_it = second.mnemonic() == Mnemonic::Mov
                && second.op1_kind() == OpKind::Memory
                && second.memory_base() == first.op0_register()
                && second.memory_index() == Register::None
                && second.memory_displacement64() == 0;
            loads_it.then(|| first.ip_rel_memory_address())?
        }
        // `mov d(%rip),%reg`.
        Mnemonic::Mov if first.op1_kind() == OpKind::Memory && first.is_ip_rel_memory_operand() => {
            first.ip_rel_memory_address()
        }
        _ => return None,
    };
    let lo = symbols.code.iter().map(|c| c.address).min()?;
    let hi = symbols.code.iter().map(|c| c.address + c.size).max()?;
    let relative = |address: u64| address.wrapping_sub(at) as i64;
    Some((relative(slot), relative(lo), relative(hi)))
}

/// The kernel's form of a function's arguments (the table's are valid: see the tests).
fn site(function: &Function) -> (xtrace_common::usdt::UsdtSite, Vec<bool>) {
    parse_args(function.args)
        .map_err(|e| e.to_string())
        .and_then(|args| kernel_form(&args, function.types))
        .unwrap_or_else(|e| unreachable!("{}: {e}", function.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::{ranges::SOURCE_NVTX, usdt::arg_kind};

    #[test]
    fn every_function_reads_what_its_operation_needs() {
        for function in FUNCTIONS {
            let (site, _) = site(function);
            let nargs = usize::from(site.nargs);
            assert_eq!(nargs, function.types.len(), "{}", function.name);
            assert_eq!(
                (site.args[0].kind, site.args[0].offset as u64),
                (arg_kind::CONST, SOURCE_NVTX),
                "{}",
                function.name
            );
            let needed = match function.op {
                RangeOp::Push | RangeOp::Mark => 3,
                RangeOp::Start => 4,
                RangeOp::Closed => 5,
                RangeOp::Pop | RangeOp::End => 2,
                RangeOp::ThreadName => 3,
                RangeOp::GpuRecords | RangeOp::GpuDrain => {
                    unreachable!("no NVTX function hands over GPU records")
                }
            };
            assert!(nargs >= needed, "{}", function.name);
            for (i, ty) in function.types.iter().enumerate() {
                assert_eq!(
                    site.args[i].string,
                    ty.string_kind(),
                    "{} argument {i}",
                    function.name
                );
                if let UsdtArgType::Message { type_arg } = ty {
                    let type_arg = usize::from(*type_arg);
                    assert!(
                        type_arg < nargs && site.args[type_arg].size == 4,
                        "{}",
                        function.name
                    );
                    assert_eq!(site.args[type_arg].offset, 32, "{}", function.name);
                    assert_eq!(site.args[i].offset, 40, "{}", function.name);
                }
            }
        }
    }

    #[test]
    fn libraries_by_name() {
        assert!(is_v2(Path::new("/x/nvidia/nvtx/lib/libnvToolsExt.so.1")));
        assert!(is_v2(Path::new("/x/libnvtx3interop.so.1")));
        assert!(!is_v2(Path::new("/x/libxtrace_tool.so")));
    }
}
