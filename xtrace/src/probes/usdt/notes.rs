//! `.note.stapsdt` notes: one per USDT call site, each naming its provider, probe name, location,
//! semaphore and argument string (the format `<sys/sdt.h>` writes). Locations are adjusted for
//! prelinking through `.stapsdt.base`, and turned into the file offsets the kernel's uprobes take.
use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use super::args::{parse_args, ArgError, ArgSpec};

/// The note type of a stapsdt note.
const NT_STAPSDT: u32 = 3;

/// One USDT call site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtNote {
    pub provider: String,
    pub name: String,
    /// The probe's address in the file's layout, after the `.stapsdt.base` adjustment.
    pub address: u64,
    /// File offset of the probed instruction (what uprobes attach to).
    pub offset: u64,
    /// Address of the semaphore (`unsigned short` in `.probes`), if the probe has one.
    pub semaphore: Option<u64>,
    /// File offset of the semaphore: the kernel's reference-counter offset.
    pub semaphore_offset: Option<u64>,
    /// The argument string as written in the note.
    pub args_text: String,
    /// The parsed arguments, or why they do not parse.
    pub args: Result<Vec<ArgSpec>, ArgError>,
}

/// Why a file's notes cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// It does not parse as ELF.
    #[error("{0}")]
    Elf(String),
    /// It is code for another machine (its `object::Architecture`).
    #[error("{0} code, not x86-64")]
    Architecture(String),
}

/// Reads every stapsdt note of a parsed ELF file. Malformed notes are skipped, each with a
/// warning in the second list; the file must be x86-64 code (another machine's notes name its
/// registers, and its code is no place for x86's probes).
pub fn read_notes<'a, R: object::ReadRef<'a>>(
    file: &object::File<'a, R>,
) -> Result<(Vec<UsdtNote>, Vec<String>), Unreadable> {
    if !matches!(
        file.architecture(),
        object::Architecture::X86_64 | object::Architecture::I386 | object::Architecture::X86_64_X32
    ) {
        return Err(Unreadable::Architecture(format!("{:?}", file.architecture())));
    }
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    let Some(section) = file.section_by_name(".note.stapsdt") else {
        return Ok((notes, warnings));
    };
    if !file.is_64() {
        warnings.push("32-bit ELF: its USDT notes are not supported".into());
        return Ok((notes, warnings));
    }
    let bytes = section.data().map_err(|e| Unreadable::Elf(e.to_string()))?;
    let base_section = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let segments: Vec<(u64, u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (file_offset, file_size) = s.file_range();
            (s.address(), s.size(), file_offset, file_size)
        })
        .collect();
    // Address → file offset through the loadable segment that holds it in the file.
    let file_offset = |address: u64| {
        segments
            .iter()
            .find(|(start, _, _, file_size)| address >= *start && address - start < *file_size)
            .and_then(|(start, _, offset, _)| (address - start).checked_add(*offset))
    };
    let little = file.is_little_endian();
    // Symbol values by name, read only if some argument names a symbol (`counter(%rip)`).
    let mut symbols: Option<HashMap<String, u64>> = None;
    // Notes are counted from 1, in the order of .note.stapsdt (as `readelf -n` lists them).
    for (number, raw) in (1..).zip(NoteIter::new(bytes, little)) {
        let raw = match raw {
            Ok(raw) => raw,
            Err(reason) => {
                warnings.push(format!(
                    "USDT note {number} is malformed ({reason}); it and the notes after it are skipped"
                ));
                break;
            }
        };
        if raw.owner != b"stapsdt" || raw.kind != NT_STAPSDT {
            continue;
        }
        match parse_desc(raw.desc, little) {
            Ok(desc) => {
                let adjust = match (base_section, desc.base) {
                    (Some(actual), recorded) if recorded != 0 => actual.wrapping_sub(recorded),
                    _ => 0,
                };
                let address = desc.pc.wrapping_add(adjust);
                let semaphore = (desc.semaphore != 0).then(|| desc.semaphore.wrapping_add(adjust));
                let label = format!("{}:{}", desc.provider, desc.name);
                let Some(offset) = file_offset(address) else {
                    warnings.push(format!(
                        "USDT probe {label} at {address:#x} lies in no loadable segment; skipped"
                    ));
                    continue;
                };
                let semaphore_offset = match semaphore {
                    Some(sem) => match file_offset(sem) {
                        Some(offset) => Some(offset),
                        None => {
                            warnings.push(format!(
                                "USDT probe {label}: semaphore {sem:#x} lies in no loadable segment; skipped"
                            ));
                            continue;
                        }
                    },
                    None => None,
                };
                let mut args = parse_args(&desc.args);
                if let Ok(args) = &mut args {
                    for arg in args.iter_mut() {
                        let Some(name) = arg.symbol() else { continue };
                        let table = symbols.get_or_insert_with(|| symbol_table(file));
                        if let Some(&value) = table.get(name) {
                            arg.resolve_symbol(value, address);
                        }
                    }
                }
                notes.push(UsdtNote {
                    args,
                    provider: desc.provider,
                    name: desc.name,
                    address,
                    offset,
                    semaphore,
                    semaphore_offset,
                    args_text: desc.args,
                });
            }
            Err(reason) => warnings.push(format!("USDT note {number} is malformed ({reason}); skipped")),
        }
    }
    Ok((notes, warnings))
}

/// Every defined symbol of `.symtab` and `.dynsym` by name.
/// Symbols an operand may name, by name: every symbol defined in a section, data or code, and
/// also one without a type (a global an assembly file declares with no `.type`, which
/// `is_definition` leaves out); not section, file or thread-local symbols.
fn symbol_table<'data>(file: &object::File<'data, impl object::ReadRef<'data>>) -> HashMap<String, u64> {
    use object::SymbolKind;
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.section_index().is_some())
        .filter(|s| {
            matches!(
                s.kind(),
                SymbolKind::Data | SymbolKind::Text | SymbolKind::Unknown
            )
        })
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect()
}

struct RawNote<'a> {
    owner: &'a [u8],
    kind: u32,
    desc: &'a [u8],
}

/// The notes of a note section: `namesz`, `descsz`, `type`, then the name and the descriptor,
/// each padded to 4 bytes.
struct NoteIter<'a> {
    bytes: &'a [u8],
    little: bool,
}

impl<'a> NoteIter<'a> {
    fn new(bytes: &'a [u8], little: bool) -> Self {
        NoteIter { bytes, little }
    }
}

fn u32_at(bytes: &[u8], at: usize, little: bool) -> Option<u32> {
    let raw: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(if little {
        u32::from_le_bytes(raw)
    } else {
        u32::from_be_bytes(raw)
    })
}

fn padded(len: usize) -> Option<usize> {
    len.checked_add(3).map(|n| n & !3)
}

impl<'a> Iterator for NoteIter<'a> {
    type Item = Result<RawNote<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.bytes.is_empty() {
            return None;
        }
        let result = (|| {
            let header = |at| u32_at(self.bytes, at, self.little).ok_or("truncated header");
            let (namesz, descsz, kind) = (header(0)? as usize, header(4)? as usize, header(8)?);
            let name_end = 12usize.checked_add(namesz).ok_or("name size overflows")?;
            let desc_start = padded(name_end).ok_or("name size overflows")?;
            let desc_end = desc_start
                .checked_add(descsz)
                .ok_or("descriptor size overflows")?;
            if desc_end > self.bytes.len() {
                return Err("note runs past the section");
            }
            let name = &self.bytes[12..name_end];
            let owner = name.strip_suffix(b"\0").unwrap_or(name);
            let note = RawNote {
                owner,
                kind,
                desc: &self.bytes[desc_start..desc_end],
            };
            let next = padded(desc_end).unwrap_or(usize::MAX).min(self.bytes.len());
            self.bytes = &self.bytes[next..];
            Ok(note)
        })();
        if result.is_err() {
            self.bytes = &[];
        }
        Some(result.map_err(str::to_string))
    }
}

struct Desc {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
    args: String,
}

/// A 64-bit stapsdt descriptor: pc, base, semaphore (8 bytes each), then provider, name and
/// argument string, each NUL-terminated.
fn parse_desc(desc: &[u8], little: bool) -> Result<Desc, String> {
    let word = |at: usize| -> Result<u64, String> {
        let raw: [u8; 8] = desc
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .ok_or("descriptor shorter than its three addresses")?;
        Ok(if little {
            u64::from_le_bytes(raw)
        } else {
            u64::from_be_bytes(raw)
        })
    };
    let (pc, base, semaphore) = (word(0)?, word(8)?, word(16)?);
    let mut strings = desc[24..].split(|&b| b == 0);
    let mut text = |what: &str| -> Result<String, String> {
        let bytes = strings.next().ok_or_else(|| format!("no {what}"))?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    };
    let provider = text("provider")?;
    let name = text("probe name")?;
    // The argument string is optional in old notes.
    let args = text("arguments").unwrap_or_default();
    if provider.is_empty() || name.is_empty() {
        return Err("empty provider or probe name".into());
    }
    if !desc[24..].ends_with(b"\0") {
        return Err("strings are not NUL-terminated".into());
    }
    Ok(Desc {
        pc,
        base,
        semaphore,
        provider,
        name,
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(owner: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend((owner.len() as u32 + 1).to_le_bytes());
        out.extend((desc.len() as u32).to_le_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(owner);
        out.push(0);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out.extend(desc);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    fn desc(pc: u64, base: u64, sem: u64, strings: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for word in [pc, base, sem] {
            out.extend(word.to_le_bytes());
        }
        for s in strings {
            out.extend(s.as_bytes());
            out.push(0);
        }
        out
    }

    #[test]
    fn descriptors_parse() {
        let bytes = [
            note(
                b"stapsdt",
                3,
                &desc(0x1234, 0x2000, 0x4010, &["prov", "hit", "-4@%edi 8@$3"]),
            ),
            note(b"GNU", 3, &[1, 2, 3, 4]),
            note(b"stapsdt", 3, &desc(0x1300, 0x2000, 0, &["prov", "bare"])),
        ]
        .concat();
        let raw: Vec<_> = NoteIter::new(&bytes, true).map(Result::unwrap).collect();
        assert_eq!(raw.len(), 3);
        assert_eq!(raw[1].owner, b"GNU");
        let d = parse_desc(raw[0].desc, true).unwrap();
        assert_eq!((d.pc, d.base, d.semaphore), (0x1234, 0x2000, 0x4010));
        assert_eq!(
            (d.provider.as_str(), d.name.as_str(), d.args.as_str()),
            ("prov", "hit", "-4@%edi 8@$3")
        );
        let bare = parse_desc(raw[2].desc, true).unwrap();
        assert_eq!(bare.args, "");
    }

    #[test]
    fn malformed_notes_are_errors_not_panics() {
        let good = note(b"stapsdt", 3, &desc(1, 2, 3, &["p", "n", ""]));
        for cut in 0..good.len() {
            let _ = NoteIter::new(&good[..cut], true).count();
        }
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(NoteIter::new(&huge, true).next().unwrap().is_err());
        assert!(parse_desc(&[0; 10], true).is_err());
        assert!(parse_desc(&desc(1, 2, 3, &["", "n", ""]), true).is_err());
        let mut unterminated = desc(1, 2, 3, &["p", "n"]);
        unterminated.extend(b"8@%rdi");
        assert!(parse_desc(&unterminated, true).is_err());
    }
}
