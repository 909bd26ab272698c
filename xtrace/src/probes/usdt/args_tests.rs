//! Unit tests of the USDT argument specs: every operand form, symbols, the kernel form and errors.
use super::*;
use xtrace_common::usdt::string_kind;

fn reg(name: &str) -> Register {
    Register::parse(name).unwrap()
}

#[test]
fn every_form_parses() {
    let specs =
        parse_args("-4@$-5 8@%rdi -4@%edi 1@%al 8@-16(%rbp) 4@8(%rax) 1@-96(%rbp,%rax,8) 8@(%rdx)").unwrap();
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
