//! x86-64 USDT argument specs, as `<sys/sdt.h>` writes them into `.note.stapsdt`: space-separated
//! `[-]SIZE@OPERAND` where SIZE is 1, 2, 4 or 8 bytes (negative: signed) and OPERAND is in AT&T
//! syntax: `$-5` (a constant), `%edi` (a register, sub-registers included), `-16(%rbp)` (memory),
//! `-96(%rbp,%rax,8)` (memory with an index and scale), `counter+8(%rip)` (a global, once the
//! note reader has resolved the symbol).
use xtrace_common::usdt::{arg_kind, UsdtArg, MAX_USDT_ARGS, NO_REG};

/// An x86-64 general-purpose register: its byte offset in the kernel's `struct pt_regs` and the
/// width of the name used (`%al` is 1 byte of `rax`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    pub pt_regs_offset: u16,
    pub width: u8,
}

/// Offset of `ip` in `struct pt_regs`: the probed instruction's address when a uprobe fires.
const RIP: u16 = 128;

/// Byte offsets in x86-64 `struct pt_regs` of each 64-bit register, with its 32/16/8-bit names.
const REGISTERS: &[(u16, [&str; 4])] = &[
    (0, ["r15", "r15d", "r15w", "r15b"]),
    (8, ["r14", "r14d", "r14w", "r14b"]),
    (16, ["r13", "r13d", "r13w", "r13b"]),
    (24, ["r12", "r12d", "r12w", "r12b"]),
    (32, ["rbp", "ebp", "bp", "bpl"]),
    (40, ["rbx", "ebx", "bx", "bl"]),
    (48, ["r11", "r11d", "r11w", "r11b"]),
    (56, ["r10", "r10d", "r10w", "r10b"]),
    (64, ["r9", "r9d", "r9w", "r9b"]),
    (72, ["r8", "r8d", "r8w", "r8b"]),
    (80, ["rax", "eax", "ax", "al"]),
    (88, ["rcx", "ecx", "cx", "cl"]),
    (96, ["rdx", "edx", "dx", "dl"]),
    (104, ["rsi", "esi", "si", "sil"]),
    (112, ["rdi", "edi", "di", "dil"]),
    (128, ["rip", "eip", "ip", ""]),
    (152, ["rsp", "esp", "sp", "spl"]),
];

impl Register {
    /// A register by its AT&T name without the `%`; `None` for unknown names and for the
    /// high-byte registers (`%ah`), which have no offset of their own.
    pub fn parse(name: &str) -> Option<Register> {
        // `%r10l` is another spelling of `%r10b`.
        let spelled;
        let name = match name.strip_suffix('l') {
            Some(number) if number.len() > 1 && number.as_bytes()[1..].iter().all(u8::is_ascii_digit) => {
                spelled = format!("{number}b");
                spelled.as_str()
            }
            _ => name,
        };
        REGISTERS.iter().find_map(|(offset, names)| {
            let index = names.iter().position(|n| !n.is_empty() && *n == name)?;
            Some(Register {
                pt_regs_offset: *offset,
                width: [8, 4, 2, 1][index],
            })
        })
    }
}

/// Where an argument's value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    Constant(i64),
    Register(Register),
    Memory {
        /// None for an absolute address (`sym(,%reg,4)`, as GCC writes an array element in a
        /// position-dependent executable).
        base: Option<Register>,
        /// Index register and scale (1, 2, 4 or 8).
        index: Option<(Register, u8)>,
        displacement: i64,
        /// A symbol the displacement is relative to (`counter+8(%rip)`): readable once the note
        /// reader resolves it ([`ArgSpec::resolve_symbol`]).
        symbol: Option<String>,
    },
    /// User memory at the call site's own address plus this displacement: a `%rip`-relative
    /// symbol resolved against the site (position-independent, as `%rip` is the site's address
    /// when the probe fires).
    SiteRelative(i64),
}

/// One parsed argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    pub operand: Operand,
}

/// Why an argument string does not parse: the byte column (from 1) and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    pub column: usize,
    pub reason: String,
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at column {}", self.reason, self.column)
    }
}

/// Parses a whole argument string (empty: no arguments).
pub fn parse_args(text: &str) -> Result<Vec<ArgSpec>, ArgError> {
    let mut specs = Vec::new();
    let mut at = 0;
    for word in text.split(' ') {
        if !word.is_empty() {
            if specs.len() == MAX_USDT_ARGS {
                return Err(ArgError {
                    column: at + 1,
                    reason: format!("more than {MAX_USDT_ARGS} arguments"),
                });
            }
            specs.push(parse_arg(word).map_err(|(offset, reason)| ArgError {
                column: at + offset + 1,
                reason,
            })?);
        }
        at += word.len() + 1;
    }
    Ok(specs)
}

type Failure = (usize, String);

/// Parses one `[-]SIZE@OPERAND`; errors carry the byte offset in `word`.
pub fn parse_arg(word: &str) -> Result<ArgSpec, Failure> {
    let (size_text, operand_text, operand_at) = match word.find('@') {
        Some(at) => (&word[..at], &word[at + 1..], at + 1),
        // Old notes have no size: a 64-bit unsigned value.
        None => ("8", word, 0),
    };
    let (signed, digits) = match size_text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, size_text),
    };
    let size = match digits {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        // sdt.h marks a float or double with `f` (`4f@`, `8f@`).
        _ if digits.ends_with('f') => {
            return Err((
                0,
                format!("`{word}` is a floating-point argument, which xtrace does not read"),
            ))
        }
        _ => {
            return Err((
                0,
                format!("argument size `{size_text}` is not 1, 2, 4 or 8 (negative: signed)"),
            ))
        }
    };
    let operand = parse_operand(operand_text).map_err(|(at, reason)| (operand_at + at, reason))?;
    Ok(ArgSpec {
        size,
        signed,
        operand,
    })
}

fn parse_operand(text: &str) -> Result<Operand, Failure> {
    if let Some(number) = text.strip_prefix('$') {
        return parse_int(number)
            .map(Operand::Constant)
            .ok_or((1, format!("constant `{number}` is not an integer")));
    }
    if let Some(name) = text.strip_prefix('%') {
        return register(name, 0).map(Operand::Register);
    }
    let open = text.find('(').ok_or((
        0,
        format!("operand `{text}` is not $CONST, %REG or DISP(%BASE[,%INDEX,SCALE])"),
    ))?;
    if !text.ends_with(')') {
        return Err((text.len(), "memory operand does not end with `)`".into()));
    }
    let (displacement, symbol) = parse_displacement(&text[..open])?;
    let inner = &text[open + 1..text.len() - 1];
    let mut parts = inner.split(',');
    let base_text = parts.next().unwrap_or("");
    let base_at = open + 1;
    let base = match base_text.strip_prefix('%') {
        Some(name) => Some(register(name, base_at)?),
        // No base: the displacement and the index make the address (an index is required).
        None if base_text.is_empty() && inner.contains(',') => None,
        None => return Err((base_at, format!("base `{base_text}` is not a %register"))),
    };
    let index = match parts.next() {
        None => None,
        Some(index_text) => {
            let index_at = base_at + base_text.len() + 1;
            let index = match index_text.strip_prefix('%') {
                Some(name) => register(name, index_at)?,
                None => return Err((index_at, format!("index `{index_text}` is not a %register"))),
            };
            let scale_at = index_at + index_text.len() + 1;
            let scale = match parts.next() {
                None => 1,
                Some("1") => 1,
                Some("2") => 2,
                Some("4") => 4,
                Some("8") => 8,
                Some(other) => return Err((scale_at, format!("scale `{other}` is not 1, 2, 4 or 8"))),
            };
            Some((index, scale))
        }
    };
    if parts.next().is_some() {
        return Err((open, "memory operand has more than base, index and scale".into()));
    }
    Ok(Operand::Memory {
        base,
        index,
        displacement,
        symbol,
    })
}

/// `-16` → (-16, None); `counter+8` → (8, Some("counter")); `8+counter`, GCC's order for a
/// field or element of a global, → (8, Some("counter")); `` → (0, None). Terms are integers and
/// at most one symbol, joined by `+` and `-` (a symbol only added).
fn parse_displacement(text: &str) -> Result<(i64, Option<String>), Failure> {
    if text.is_empty() {
        return Ok((0, None));
    }
    if let Some(value) = parse_int(text) {
        return Ok((value, None));
    }
    // A sign after a term's first character starts the next term.
    let mut starts: Vec<usize> = text
        .char_indices()
        .skip(1)
        .filter(|(_, c)| matches!(c, '+' | '-'))
        .map(|(i, _)| i)
        .collect();
    starts.insert(0, 0);
    let mut displacement = 0i64;
    let mut symbol: Option<String> = None;
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(text.len());
        let term = &text[start..end];
        if let Some(value) = parse_int(term) {
            displacement = displacement.wrapping_add(value);
            continue;
        }
        let name = term.strip_prefix('+').unwrap_or(term);
        let valid_symbol = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '@'))
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_symbol || symbol.is_some() {
            return Err(match n {
                0 => (0, format!("displacement `{text}` is not a number or symbol")),
                _ => (start, format!("offset `{term}` is not an integer")),
            });
        }
        symbol = Some(name.to_string());
    }
    match symbol {
        Some(symbol) => Ok((displacement, Some(symbol))),
        None => Err((0, format!("displacement `{text}` is not a number or symbol"))),
    }
}

/// Register `name` (written after a `%` at byte `at`).
fn register(name: &str, at: usize) -> Result<Register, Failure> {
    Register::parse(name).ok_or_else(|| {
        let why = match name {
            _ if name.starts_with("fs:") || name.starts_with("gs:") => {
                format!("`%{name}` is a thread-local variable (segment-relative), which xtrace does not read")
            }
            "ah" | "bh" | "ch" | "dh" => {
                format!("`%{name}` is a high-byte register, which xtrace does not read")
            }
            _ if name.starts_with("xmm") || name.starts_with("ymm") || name.starts_with("st") => {
                format!("`%{name}` is a floating-point or vector register, which xtrace does not read")
            }
            _ => format!("unknown or unsupported register `%{name}`"),
        };
        (at, why)
    })
}

/// A decimal or `0x` hexadecimal integer with an optional sign.
fn parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        // Unsigned 64-bit constants keep their bits.
        Some(magnitude as i64)
    }
}

impl ArgSpec {
    /// The symbol this argument's address names, if any.
    pub fn symbol(&self) -> Option<&str> {
        match &self.operand {
            Operand::Memory {
                symbol: Some(symbol), ..
            } => Some(symbol),
            _ => None,
        }
    }

    /// Replaces a symbol-relative operand by one the kernel can read: `symbol+addend(%rip)`
    /// becomes [`Operand::SiteRelative`] against the call site at `site`, `symbol+addend(%reg)`
    /// an absolute displacement. `symbol_address` is the symbol's value in the file's layout.
    pub fn resolve_symbol(&mut self, symbol_address: u64, site: u64) {
        if let Operand::Memory {
            base,
            index,
            displacement,
            symbol: symbol @ Some(_),
        } = &mut self.operand
        {
            let absolute = symbol_address.wrapping_add(*displacement as u64);
            if base.is_some_and(|b| b.pt_regs_offset == RIP) && index.is_none() {
                self.operand = Operand::SiteRelative(absolute.wrapping_sub(site) as i64);
            } else {
                *displacement = absolute as i64;
                *symbol = None;
            }
        }
    }

    /// The kernel's form of this argument; `string` (`string_kind`) asks for the value to be read
    /// as a pointer to a string too. Errors when it cannot be read (an unresolved symbol, a bare
    /// `%rip` displacement).
    pub fn to_kernel(&self, string: u8) -> Result<UsdtArg, String> {
        let mut arg = UsdtArg {
            size: self.size,
            signed: u8::from(self.signed),
            string,
            index_reg: NO_REG,
            scale: 1,
            ..UsdtArg::default()
        };
        match &self.operand {
            Operand::Constant(value) => {
                arg.kind = arg_kind::CONST;
                arg.offset = *value;
            }
            Operand::Register(register) => {
                arg.kind = arg_kind::REG;
                arg.reg = register.pt_regs_offset;
                // `8@%eax` is eax zero-extended: never read more of a register than its name says.
                arg.size = self.size.min(register.width);
            }
            Operand::Memory {
                symbol: Some(symbol), ..
            } => {
                return Err(format!("symbol `{symbol}` is not in the file's symbol tables"));
            }
            Operand::SiteRelative(displacement) => {
                arg.kind = arg_kind::MEM;
                arg.reg = RIP;
                arg.offset = *displacement;
            }
            Operand::Memory {
                base,
                index,
                displacement,
                symbol: None,
            } => {
                if base.is_some_and(|b| b.pt_regs_offset == RIP) {
                    return Err("operand relative to %rip without a symbol is not supported".into());
                }
                arg.kind = arg_kind::MEM;
                // No base register: the kernel reads NO_REG as 0.
                arg.reg = base.map_or(NO_REG, |b| b.pt_regs_offset);
                arg.offset = *displacement;
                if let Some((index, scale)) = index {
                    arg.index_reg = index.pt_regs_offset;
                    arg.scale = *scale;
                }
            }
        }
        Ok(arg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::usdt::string_kind;

    fn reg(name: &str) -> Register {
        Register::parse(name).unwrap()
    }

    #[test]
    fn every_form_parses() {
        let specs =
            parse_args("-4@$-5 8@%rdi -4@%edi 1@%al 8@-16(%rbp) 4@8(%rax) 1@-96(%rbp,%rax,8) 8@(%rdx)")
                .unwrap();
        assert_eq!(specs.len(), 8);
        assert_eq!(
            specs[0],
            ArgSpec {
                size: 4,
                signed: true,
                operand: Operand::Constant(-5)
            }
        );
        assert_eq!(specs[1].operand, Operand::Register(reg("rdi")));
        assert_eq!(
            specs[2],
            ArgSpec {
                size: 4,
                signed: true,
                operand: Operand::Register(reg("edi"))
            }
        );
        assert_eq!(
            reg("edi"),
            Register {
                pt_regs_offset: 112,
                width: 4
            }
        );
        assert_eq!(
            reg("al"),
            Register {
                pt_regs_offset: 80,
                width: 1
            }
        );
        assert_eq!(reg("r10l"), reg("r10b"));
        assert_eq!(
            reg("r10b"),
            Register {
                pt_regs_offset: 56,
                width: 1
            }
        );
        assert_eq!(
            specs[4].operand,
            Operand::Memory {
                base: Some(reg("rbp")),
                index: None,
                displacement: -16,
                symbol: None
            }
        );
        assert_eq!(
            specs[6].operand,
            Operand::Memory {
                base: Some(reg("rbp")),
                index: Some((reg("rax"), 8)),
                displacement: -96,
                symbol: None
            }
        );
        assert_eq!(
            specs[7].operand,
            Operand::Memory {
                base: Some(reg("rdx")),
                index: None,
                displacement: 0,
                symbol: None
            }
        );
        assert!(!specs[3].signed);
    }

    #[test]
    fn symbols_hex_and_old_forms() {
        let specs = parse_args("-4@counter+8(%rip) 8@0x10(%rsp) %rsi 8@$0xffffffffffffffff").unwrap();
        assert_eq!(
            specs[0].operand,
            Operand::Memory {
                base: Some(reg("rip")),
                index: None,
                displacement: 8,
                symbol: Some("counter".into())
            }
        );
        assert!(specs[0].to_kernel(string_kind::NONE).is_err());
        let mut global = specs[0].clone();
        global.resolve_symbol(0x4010, 0x1150);
        assert_eq!(global.operand, Operand::SiteRelative(0x4018 - 0x1150));
        let arg = global.to_kernel(string_kind::NONE).unwrap();
        assert_eq!(
            (arg.kind, arg.reg, arg.offset, arg.size),
            (arg_kind::MEM, 128, 0x4018 - 0x1150, 4)
        );
        let mut absolute = parse_arg("8@table+16(%rax)").unwrap();
        absolute.resolve_symbol(0x600000, 0x1150);
        assert_eq!(absolute.to_kernel(string_kind::NONE).unwrap().offset, 0x600010);
        assert!(parse_arg("8@16(%rip)")
            .unwrap()
            .to_kernel(string_kind::NONE)
            .is_err());
        assert_eq!(specs[1].to_kernel(string_kind::NONE).unwrap().offset, 16);
        assert_eq!(
            specs[2],
            ArgSpec {
                size: 8,
                signed: false,
                operand: Operand::Register(reg("rsi"))
            }
        );
        assert_eq!(specs[3].operand, Operand::Constant(-1));
        assert_eq!(parse_args("").unwrap(), vec![]);
        assert_eq!(parse_args("  8@%rdi  ").unwrap().len(), 1);
    }

    /// What GCC -O2 writes for a field or element of a global: the offset before the symbol
    /// (`8+gp(%rip)`), and in a position-dependent executable an absolute address with an index
    /// and no base (`garr(,%rdi,4)`).
    #[test]
    fn gcc_global_fields_and_elements() {
        let symbolic = |text: &str| match parse_arg(text).unwrap().operand {
            Operand::Memory {
                base,
                displacement,
                symbol,
                ..
            } => (base.map(|b| b.pt_regs_offset), displacement, symbol.unwrap()),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(symbolic("-8@8+gp(%rip)"), (Some(RIP), 8, "gp".to_string()));
        assert_eq!(symbolic("-4@12+garr(%rip)"), (Some(RIP), 12, "garr".to_string()));
        assert_eq!(symbolic("4@-4+garr+8(%rip)"), (Some(RIP), 4, "garr".to_string()));
        assert_eq!(symbolic("4@garr-4(%rip)"), (Some(RIP), -4, "garr".to_string()));
        let mut element = parse_arg("-4@garr(,%rdi,4)").unwrap();
        element.resolve_symbol(0x404040, 0x401136);
        let arg = element.to_kernel(string_kind::NONE).unwrap();
        assert_eq!(
            (arg.kind, arg.reg, arg.offset, arg.index_reg, arg.scale),
            (arg_kind::MEM, NO_REG, 0x404040, 112, 4)
        );
        assert_eq!(
            parse_arg("4@0x10(,%rax,8)")
                .unwrap()
                .to_kernel(string_kind::NONE)
                .unwrap()
                .reg,
            NO_REG
        );
        for (bad, column, reason) in [
            ("8@a+b(%rip)", 3, "offset `+b` is not an integer"),
            ("8@8+-(%rip)", 3, "offset `+` is not an integer"),
            ("8@gp(,)", 0, ""),
            ("8@gp()", 5, "base `` is not a %register"),
        ] {
            let Err((at, why)) = parse_arg(bad) else {
                panic!("{bad} parsed");
            };
            if !reason.is_empty() {
                assert_eq!((at, why.as_str()), (column, reason), "{bad}");
            }
        }
    }

    #[test]
    fn kernel_form() {
        let [sib, narrow] = [
            parse_arg("-1@-96(%rsi,%r8,8)")
                .unwrap()
                .to_kernel(string_kind::C)
                .unwrap(),
            parse_arg("8@%eax").unwrap().to_kernel(string_kind::NONE).unwrap(),
        ];
        assert_eq!(
            (
                sib.kind,
                sib.size,
                sib.signed,
                sib.string,
                sib.reg,
                sib.index_reg,
                sib.scale,
                sib.offset
            ),
            (arg_kind::MEM, 1, 1, 1, 104, 72, 8, -96)
        );
        assert_eq!(
            (narrow.kind, narrow.size, narrow.reg, narrow.index_reg),
            (arg_kind::REG, 4, 80, NO_REG)
        );
    }

    #[test]
    fn errors_point_at_the_offending_column() {
        let err = |text: &str| parse_args(text).unwrap_err();
        assert_eq!(err("3@%rdi").column, 1);
        assert_eq!(err("8@%rdi 8@%xyz").column, 10);
        assert_eq!(err("8@%ah").column, 3);
        // What xtrace cannot read is named for what it is.
        assert_eq!(
            err("8@%ah").reason,
            "`%ah` is a high-byte register, which xtrace does not read"
        );
        assert_eq!(
            err("8f@%xmm0").reason,
            "`8f@%xmm0` is a floating-point argument, which xtrace does not read"
        );
        assert_eq!(
            err("8@%xmm1").reason,
            "`%xmm1` is a floating-point or vector register, which xtrace does not read"
        );
        assert_eq!(
            err("-4@%fs:tlsv@tpoff").reason,
            "`%fs:tlsv@tpoff` is a thread-local variable (segment-relative), which xtrace does not read"
        );
        assert_eq!(err("8@$abc").column, 4);
        assert_eq!(err("8@-16(%rbp").reason, "memory operand does not end with `)`");
        assert_eq!(err("8@(%rbp,%rax,3)").column, 14);
        assert_eq!(err("8@(rbp)").column, 4);
        assert!(err(&"8@%rdi ".repeat(13)).reason.contains("more than 12"));
        // A register name starting with a multi-byte character (found by the fuzz test).
        assert_eq!(err("8@%éll").column, 3);
        assert!(Register::parse("é1l").is_none());
    }
}
