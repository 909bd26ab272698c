//! The folded stack format every stack output shares (stacks.folded, offcpu.folded,
//! span-flamegraph's lines): `root;outer;...;inner COUNT`, frame names made safe for it.

/// A frame name safe for the folded format (no `;`, no line breaks).
pub fn folded_frame(name: &str) -> String {
    name.replace([';', '\n'], ":")
}

/// The folded stack `root;frames...;leaf`, every frame made safe with [`folded_frame`].
pub fn fold(root: &str, frames: &[String], leaf: Option<&str>) -> String {
    let mut line = folded_frame(root);
    for frame in frames.iter().map(String::as_str).chain(leaf) {
        line.push(';');
        line += &folded_frame(frame);
    }
    line
}
