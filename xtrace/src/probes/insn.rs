//! Instructions the kernel's x86 uprobes refuse or mishandle. Before it installs a breakpoint the
//! kernel decodes the instruction it replaces (arch/x86/kernel/uprobes.c) and rejects, with
//! ENOTSUPP (524), one with a lock prefix or an ES/CS/SS/DS segment-override prefix, and
//! `mov ss`/`pop ss`, which hold off the trap. An uprobe_multi link with such an offset fails as a
//! whole, without saying which, so xtrace checks each offset first and names the function.
//!
//! The kernel also emulates, instead of running, a VEX-, EVEX- or XOP-encoded instruction whose
//! opcode byte is that of a one-byte jump, call or `nop` (0x70–0x7f, 0x90, 0xe8, 0xe9, 0xeb): its
//! branch and nop emulation look at that byte alone. Such an instruction (`vpcmpeqb`, `vpshufd`,
//! `vzeroupper`, `kmovw`, EVEX `vpbroadcastb`, which glibc's AVX2 and EVEX string functions start
//! with) is skipped, or becomes a jump, and the traced program computes wrong results: measured on
//! Linux 6.18, where a probe on an EVEX `vpbroadcastb %esi,%ymm1` left `%ymm1` unchanged, and
//! `strchrnul` so probed broke printf (`python3` launched under `-u 'libc:*'` printed `%s: %s: %s`
//! and exited 127). xtrace never probes one.
//!
//! Nor one whose opcode byte the kernel refuses as a one-byte opcode: it looks a VEX, EVEX or XOP
//! instruction's opcode byte up in its table of one-byte opcodes (`good_insns_64`), so `vmovdqu`
//! loads (0x6f), `vmovd` into a vector register (0x6e), `vpxor` (0xef), `vcomiss` (0x2f) and
//! others are refused with ENOTSUPP like the instructions those bytes are alone.
use std::os::unix::fs::FileExt;

use iced_x86::{Code, Decoder, DecoderOptions, EncodingKind, Instruction, Register};

/// The longest x86 instruction.
pub(crate) const MAX_INSN: usize = 15;

/// Why the kernel would refuse to probe the instruction at `offset` of `file`, with the
/// instruction as text; None when it can be probed. An instruction that does not decode is left
/// for the kernel to judge.
pub fn refused(file: &std::fs::File, offset: u64) -> std::io::Result<Option<String>> {
    let mut bytes = [0u8; MAX_INSN];
    let mut read = 0;
    while read < MAX_INSN {
        match file.read_at(&mut bytes[read..], offset + read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    Ok(refused_bytes(&bytes[..read]))
}

/// [`refused`] on the instruction at the start of `bytes`.
pub fn refused_bytes(bytes: &[u8]) -> Option<String> {
    let mut decoder = Decoder::new(64, bytes, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let code = &bytes[..insn.len()];
    let why = why_refused(&insn, code)?;
    let hex: Vec<String> = code.iter().map(|b| format!("{b:02x}")).collect();
    let mnemonic = format!("{:?}", insn.mnemonic()).to_lowercase();
    Some(format!("its `{mnemonic}` ({}) {why}", hex.join(" ")))
}

/// What in the decoded `insn`, whose bytes are `code`, the kernel's uprobes refuse or would not
/// run, if anything: a predicate that says which (`has a lock prefix, ...`).
pub fn why_refused(insn: &Instruction, code: &[u8]) -> Option<String> {
    if matches!(insn.code(), Code::Int3 | Code::Int1 | Code::Int_imm8 | Code::Into) {
        // The kernel accepts the probe, but stepping over a trap the program placed itself loops:
        // the program spins, its calls unrecorded, until the probe is removed.
        return Some(
            "is the program's own trap, which a uprobe cannot step over (the program would hang)".into(),
        );
    }
    let refused = if insn.has_lock_prefix() {
        "a lock prefix"
    } else if matches!(
        insn.segment_prefix(),
        Register::ES | Register::CS | Register::SS | Register::DS
    ) {
        "a segment-override prefix"
    } else if matches!(
        insn.code(),
        Code::Mov_Sreg_rm16 | Code::Mov_Sreg_r32m16 | Code::Mov_Sreg_r64m16
    ) && insn.op0_register() == Register::SS
        || matches!(insn.code(), Code::Popw_SS | Code::Popd_SS)
    {
        "a load of SS, which holds off the breakpoint's trap"
    } else {
        let opcode = vector_opcode(insn, code)?;
        let prefix = match insn.encoding() {
            EncodingKind::EVEX => "an EVEX",
            EncodingKind::XOP => "an XOP",
            _ => "a VEX",
        };
        if REFUSED_ONE_BYTE.contains(&opcode) {
            return Some(format!(
                "has {prefix} prefix and the opcode byte {opcode:#04x}, which the kernel's uprobes \
                 look up as a one-byte opcode and refuse"
            ));
        }
        if !matches!(opcode, 0x70..=0x7f | 0x90 | 0xe8 | 0xe9 | 0xeb) {
            return None;
        }
        return Some(format!(
            "has {prefix} prefix and the opcode byte {opcode:#04x} of a jump, call or nop, which the \
             kernel's uprobes emulate as one instead of running the instruction (the traced \
             program would compute wrong results)"
        ));
    };
    Some(format!("has {refused}, which the kernel's uprobes refuse"))
}

/// The one-byte opcodes the kernel's x86-64 uprobes refuse (the zeros of `good_insns_64` in
/// arch/x86/kernel/uprobes.c), which it also refuses as the opcode byte of a VEX, EVEX or XOP
/// instruction.
const REFUSED_ONE_BYTE: [u8; 40] = [
    0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62, 0x6c, 0x6d, 0x6e,
    0x6f, 0x82, 0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4, 0xe5, 0xe6, 0xe7, 0xea, 0xec, 0xed,
    0xee, 0xef, 0xf1, 0xf4, 0xfa, 0xfb,
];

/// The opcode byte of a VEX-, EVEX- or XOP-encoded `insn` (bytes `code`), which the kernel's
/// uprobes read as a one-byte opcode (see the module's header).
fn vector_opcode(insn: &Instruction, code: &[u8]) -> Option<u8> {
    let skip = match insn.encoding() {
        EncodingKind::VEX | EncodingKind::XOP => None,
        EncodingKind::EVEX => Some(4),
        _ => return None,
    };
    // Legacy prefixes (a segment override, 0x67) come first; none is one of these bytes.
    let start = code.iter().position(|b| matches!(b, 0xc4 | 0xc5 | 0x62 | 0x8f))?;
    let skip = skip.unwrap_or(if code[start] == 0xc5 { 2 } else { 3 });
    code.get(start + skip).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_the_kernel_refuses() {
        // lock decl (%rdi): pthread_spin_lock's first instruction.
        let lock = refused_bytes(&[0xf0, 0xff, 0x0f]).expect("refused");
        assert!(lock.contains("lock prefix"), "{lock}");
        // cs nopw 0x0(%rax,%rax,1)
        let cs = refused_bytes(&[0x2e, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]).expect("refused");
        assert!(cs.contains("segment-override"), "{cs}");
        // mov %eax,%ss
        assert!(refused_bytes(&[0x8e, 0xd0]).is_some());
        // int3, int $0x80, int1 (icebp): the program's own traps.
        let int3 = refused_bytes(&[0xcc, 0x48, 0x8d, 0x47, 0x05, 0xc3]).expect("refused");
        assert_eq!(
            int3,
            "its `int3` (cc) is the program's own trap, which a uprobe cannot step over (the \
             program would hang)"
        );
        assert!(refused_bytes(&[0xcd, 0x80]).is_some());
        assert!(refused_bytes(&[0xf1]).is_some());
    }

    #[test]
    fn ordinary_entries_are_probed() {
        for bytes in [
            &[0xf3, 0x0f, 0x1e, 0xfa][..],                  // endbr64
            &[0x55],                                        // push %rbp
            &[0x48, 0x8d, 0x44, 0x7f, 0x01],                // lea 0x1(%rdi,%rdi,2),%rax
            &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], // mov %fs:0x28,%rax
            &[0xc3],                                        // ret
            &[0x0f, 0x1f, 0x44, 0, 0],                      // nopl 0x0(%rax,%rax,1)
        ] {
            assert_eq!(refused_bytes(bytes), None, "{bytes:x?}");
        }
    }

    #[test]
    fn vector_instructions_the_kernel_takes_for_jumps() {
        for bytes in [
            &[0xc5, 0xed, 0x74, 0xd9][..],   // vpcmpeqb %ymm1,%ymm2,%ymm3 (VEX2 0x74: je)
            &[0xc5, 0xf8, 0x77],             // vzeroupper (0x77: ja)
            &[0xc5, 0xf9, 0x70, 0xd9, 0x1b], // vpshufd $0x1b,%xmm1,%xmm3 (0x70: jo)
            &[0xc5, 0xf8, 0x90, 0xd1],       // kmovw %k1,%k2 (0x90: nop)
            &[0xc5, 0xe9, 0xe8, 0xd9],       // vpsubsb (0xe8: call)
            &[0xc4, 0xe2, 0x7d, 0x78, 0xc1], // vpbroadcastb %xmm1,%ymm0 (VEX3 0x78)
            &[0x62, 0xe2, 0x7d, 0x28, 0x7a, 0xce], // vpbroadcastb %esi,%ymm17 (EVEX 0x7a)
        ] {
            let why = refused_bytes(bytes).unwrap_or_else(|| panic!("{bytes:x?} refused"));
            assert!(why.contains("emulate as one instead of running"), "{why}");
        }
        let evex = refused_bytes(&[0x62, 0xe2, 0x7d, 0x28, 0x7a, 0xce]).unwrap();
        assert!(
            evex.starts_with(
                "its `vpbroadcastb` (62 e2 7d 28 7a ce) has an EVEX prefix and the opcode byte 0x7a"
            ),
            "{evex}"
        );
        // Checked on Linux 6.18 (uprobe_multi links on each as a function's first instruction).
        for bytes in [
            &[0xc5, 0xf8, 0x57, 0xc0][..],         // vxorps (0x57): single-stepped, runs
            &[0xc5, 0xe9, 0xdf, 0xd9],             // vpandn
            &[0xc5, 0xf8, 0x10, 0x0f],             // vmovups (%rdi),%xmm1
            &[0xc5, 0xf8, 0x28, 0xca],             // vmovaps %xmm2,%xmm1
            &[0x62, 0xe1, 0x7c, 0x48, 0x10, 0x0f], // vmovups (%rdi),%zmm17 (EVEX 0x10)
            &[0x74, 0x05],                         // je: a real jump, emulated correctly
        ] {
            assert_eq!(refused_bytes(bytes), None, "{bytes:x?}");
        }
        // Refused by the kernel (ENOTSUPP): opcode bytes its one-byte table refuses.
        for (bytes, opcode) in [
            (&[0xc5, 0xfa, 0x6f, 0x0f][..], 0x6f),         // vmovdqu (%rdi),%xmm1
            (&[0xc5, 0xf9, 0x6e, 0xce], 0x6e),             // vmovd %esi,%xmm1
            (&[0xc5, 0xf1, 0xef, 0xc9], 0xef),             // vpxor %xmm1,%xmm1,%xmm1
            (&[0xc5, 0xf8, 0x2f, 0xca], 0x2f),             // vcomiss %xmm2,%xmm1
            (&[0xc5, 0xf9, 0xd6, 0x0f], 0xd6),             // vmovq %xmm1,(%rdi)
            (&[0x62, 0xe1, 0xfe, 0x48, 0x6f, 0x0f], 0x6f), // vmovdqu64 (%rdi),%zmm17
            (&[0x62, 0xe1, 0x7d, 0x08, 0x6e, 0xce], 0x6e), // vmovd %esi,%xmm17 (EVEX)
        ] {
            let why = refused_bytes(bytes).unwrap_or_else(|| panic!("{bytes:x?}"));
            assert!(
                why.ends_with(&format!(
                    "prefix and the opcode byte {opcode:#04x}, which the kernel's uprobes look up as a \
                     one-byte opcode and refuse"
                )),
                "{why}"
            );
        }
    }

    #[test]
    fn undecodable_bytes_are_left_to_the_kernel() {
        assert_eq!(refused_bytes(&[]), None);
        assert_eq!(refused_bytes(&[0x0f]), None);
    }
}
