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
#[path = "args_tests.rs"]
mod tests;
