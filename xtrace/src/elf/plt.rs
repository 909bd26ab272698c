//! Names of PLT stubs, `rand_r@plt` as perf and objdump show them. A call into a shared library
//! goes through its caller's stub, which has no symbol of its own, so a sample there would take
//! the name of the symbol before it (`_init`). Each stub jumps through a GOT slot
//! (`jmp *SLOT(%rip)`, after an `endbr64` in `.plt.sec`), and a dynamic relocation names the
//! function that slot holds (an `R_X86_64_IRELATIVE` one by its resolver's address). Only the ELF headers, the PLT sections and the dynamic symbols and
//! relocations are read, not the whole file.
use std::{collections::HashMap, ops::Range};

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
use object::{
    elf, read::elf::ElfFile64, Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable,
    RelocationTarget, SymbolKind,
};

/// Stub size when a PLT section does not say (`sh_entsize` 0).
const DEFAULT_ENTRY: u64 = 16;

/// One PLT stub: the file offsets of its entry and the name it is shown by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stub {
    pub offsets: Range<u64>,
    pub name: String,
}

/// The PLT stubs of x86-64 ELF file `elf`, sorted by offset; none when it has no PLT.
pub fn stubs<'d, R: object::ReadRef<'d>>(elf: &ElfFile64<'d, Endianness, R>) -> Vec<Stub> {
    if elf.elf_header().e_machine.get(elf.endian()) != elf::EM_X86_64 {
        return Vec::new(); // its code is not decoded as x86-64
    }
    let slots = got_slots(elf);
    if slots.is_empty() {
        return Vec::new();
    }
    let mut stubs = Vec::new();
    for section in elf.sections() {
        if !matches!(section.name(), Ok(".plt" | ".plt.sec" | ".plt.got")) {
            continue;
        }
        let (Ok(data), Some((file_offset, _))) = (section.data(), section.file_range()) else {
            continue;
        };
        let entry = match section.elf_section_header().sh_entsize.get(elf.endian()) {
            0 => unsized_entry(data),
            size => size,
        };
        for (index, bytes) in data.chunks(entry as usize).enumerate() {
            let at = index as u64 * entry;
            let Some(name) = jump_slot(bytes, section.address() + at).and_then(|slot| slots.get(&slot))
            else {
                continue; // PLT0, or a lazy-binding entry that only pushes its index
            };
            stubs.push(Stub {
                offsets: file_offset + at..file_offset + at + bytes.len() as u64,
                name: format!("{name}@plt"),
            });
        }
    }
    stubs.sort_by_key(|s| s.offsets.start);
    stubs
}

/// The stub size of a PLT section that does not say: 8 bytes for a static executable's `.plt`
/// (`jmp *SLOT(%rip)`, a 2-byte nop, the next `jmp` at byte 8), else [`DEFAULT_ENTRY`].
fn unsized_entry(data: &[u8]) -> u64 {
    const JMP_RIP: [u8; 2] = [0xff, 0x25];
    if data.get(0..2) == Some(&JMP_RIP) && data.get(8..10) == Some(&JMP_RIP) {
        8
    } else {
        DEFAULT_ENTRY
    }
}

/// The stub holding file offset `offset`, in stubs sorted by offset.
pub fn find(stubs: &[Stub], offset: u64) -> Option<&Stub> {
    crate::model::address::covering(stubs, offset, |s| s.offsets.clone())
}

/// Address of each GOT slot a relocation fills → the name of what it holds: the symbol a dynamic
/// relocation names, or for an `R_X86_64_IRELATIVE` slot (a library's own call to an IFUNC, such
/// as libc's to `strnlen`; every IFUNC call of a static executable, whose `.rela.plt` is no dynamic
/// relocation section) the symbol at its resolver's address, else `*ABS*+0xADDRESS` as objdump
/// writes it.
fn got_slots<'d, R: object::ReadRef<'d>>(elf: &ElfFile64<'d, Endianness, R>) -> HashMap<u64, String> {
    let dynamic = elf.dynamic_symbol_table();
    let mut slots: HashMap<u64, String> = elf
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter_map(|(slot, relocation)| {
            let RelocationTarget::Symbol(index) = relocation.target() else {
                return None;
            };
            let symbol = dynamic.as_ref()?.symbol_by_index(index).ok()?;
            Some((slot, symbol.name().ok().filter(|n| !n.is_empty())?.to_string()))
        })
        .collect();
    let irelative = irelative_slots(elf.data());
    if !irelative.is_empty() {
        let named = functions_by_address(elf);
        for (slot, resolver) in irelative {
            let name = named.get(&resolver).cloned();
            slots.insert(slot, name.unwrap_or_else(|| format!("*ABS*+{resolver:#x}")));
        }
    }
    slots
}

/// The functions (IFUNCs included) of both symbol tables by address; of several names at one
/// address, the public one (`memchr` before `__memchr`), then the shortest.
fn functions_by_address<'d, R: object::ReadRef<'d>>(
    elf: &ElfFile64<'d, Endianness, R>,
) -> HashMap<u64, String> {
    let rank = |name: &str| {
        (
            name.len() - name.trim_start_matches('_').len(),
            name.len(),
            name.to_string(),
        )
    };
    let mut named: HashMap<u64, String> = HashMap::new();
    let functions = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0);
    for symbol in functions {
        let Some(name) = symbol.name().ok().filter(|n| !n.is_empty()) else {
            continue;
        };
        match named.get(&symbol.address()) {
            Some(kept) if rank(kept) <= rank(name) => {}
            _ => {
                named.insert(symbol.address(), name.to_string());
            }
        }
    }
    named
}

/// The GOT slot an entry's code at `address` jumps through (`jmp qword ptr [rip+disp]`), if any.
fn jump_slot(bytes: &[u8], address: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    decoder.iter().take(4).find_map(|insn| {
        let through_rip = insn.mnemonic() == Mnemonic::Jmp
            && insn.op_count() == 1
            && insn.op0_kind() == OpKind::Memory
            && insn.memory_base() == Register::RIP;
        through_rip.then(|| insn.ip_rel_memory_address())
    })
}

/// Every `R_X86_64_IRELATIVE` relocation of the ELF file `data`, from every relocation section
/// (a static executable's `.rela.plt` included): (slot, resolver).
pub(crate) fn irelative_slots<'d, R: object::ReadRef<'d>>(data: R) -> Vec<(u64, u64)> {
    use object::read::elf::{FileHeader, Rela, SectionHeader};
    let parsed = elf::FileHeader64::<object::Endianness>::parse(data)
        .ok()
        .and_then(|header| {
            Some((
                header.endian().ok()?,
                header.sections(header.endian().ok()?, data).ok()?,
            ))
        });
    let Some((endian, sections)) = parsed else {
        return Vec::new();
    };
    sections
        .iter()
        .filter_map(|section| section.rela(endian, data).ok().flatten())
        .flat_map(|(relocations, _)| relocations.iter())
        .filter(|r| r.r_type(endian, false) == elf::R_X86_64_IRELATIVE)
        .filter_map(|r| Some((r.r_offset(endian), u64::try_from(r.r_addend(endian)).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_jumps_through_its_got_slot() {
        // .plt.sec: endbr64; bnd jmp *0x2fe2(%rip); nopl 0(%rax,%rax,1)
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x44, 0x00, 0x00,
        ];
        assert_eq!(jump_slot(&sec, 0x1050), Some(0x1050 + 11 + 0x2fe2));
        // .plt lazy entry: jmp *0x2fc2(%rip); push $0; jmp PLT0
        let lazy = [
            0xff, 0x25, 0xc2, 0x2f, 0x00, 0x00, 0x68, 0x00, 0x00, 0x00, 0x00, 0xe9, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(jump_slot(&lazy, 0x1030), Some(0x1030 + 6 + 0x2fc2));
        // An IBT lazy entry: endbr64; push $0; bnd jmp PLT0 — no slot.
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0x00, 0x00, 0x00, 0x00, 0xf2, 0xe9, 0xe1, 0xff, 0xff, 0xff, 0x90,
        ];
        assert_eq!(jump_slot(&ibt, 0x1020), None);
    }

    /// The C library this test runs with: glibc calls its own IFUNCs (`strnlen`, `memcpy`, ...)
    /// through `R_X86_64_IRELATIVE` slots, which name no symbol. Every stub is named all the same.
    // The closure stays: `stubs` is generic over the file's lifetime, which read_elf chooses.
    #[allow(clippy::redundant_closure)]
    #[test]
    fn irelative_stubs_of_the_c_library_are_named() {
        let stubs = crate::elf::read_elf(&crate::test_libc(), |elf| stubs(elf));
        let names: Vec<&str> = stubs.iter().map(|s| s.name.as_str()).collect();
        assert!(stubs.len() >= 10, "{names:?}");
        assert!(names.iter().all(|n| n.ends_with("@plt") && !n.starts_with('@')));
        assert!(
            names.contains(&"strnlen@plt") || names.iter().any(|n| n.starts_with("*ABS*+0x")),
            "{names:?}"
        );
        assert!(stubs.windows(2).all(|w| w[0].offsets.end <= w[1].offsets.start));
    }

    /// A static executable's IFUNC stubs (`strlen`, `memchr`: 8-byte `.plt` entries whose slots
    /// `.rela.plt` fills with R_X86_64_IRELATIVE, no dynamic section) are named too. Built here
    /// with the C compiler the fixtures need.
    #[allow(clippy::redundant_closure)]
    #[test]
    fn irelative_stubs_of_a_static_executable_are_named() {
        let dir = std::env::temp_dir().join(format!("xtrace-plt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (source, program) = (dir.join("s.c"), dir.join("s"));
        std::fs::write(
            &source,
            "#include <string.h>\nint main(int c, char **v) { return (int)strlen(v[0]) + (memchr(v[0], 'x', c) != 0); }\n",
        )
        .unwrap();
        let built = std::process::Command::new("cc")
            .args(["-O1", "-static", "-o"])
            .arg(&program)
            .arg(&source)
            .status()
            .expect("running cc");
        assert!(built.success(), "cc -static (libc6-dev's static libc)");
        let stubs = crate::elf::read_elf(program.to_str().unwrap(), |elf| stubs(elf));
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<&str> = stubs.iter().map(|s| s.name.as_str()).collect();
        assert!(
            names.contains(&"strlen@plt") && names.contains(&"memchr@plt"),
            "{names:?}"
        );
        assert!(
            stubs.iter().all(|s| s.offsets.end - s.offsets.start == 8),
            "{stubs:?}"
        );
    }

    #[test]
    fn stubs_are_found_by_offset() {
        let stubs = [
            Stub {
                offsets: 0x1030..0x1040,
                name: "puts@plt".into(),
            },
            Stub {
                offsets: 0x1040..0x1050,
                name: "rand_r@plt".into(),
            },
        ];
        assert_eq!(find(&stubs, 0x1044).map(|s| s.name.as_str()), Some("rand_r@plt"));
        assert_eq!(find(&stubs, 0x1030).map(|s| s.name.as_str()), Some("puts@plt"));
        assert_eq!(find(&stubs, 0x1050), None);
        assert_eq!(find(&stubs, 0x1000), None);
    }
}
