//! Builds the C, C++ and Rust fixtures into `<target>/xtrace-fixtures/` and exits, for runs that
//! cannot compile them where the tests run: `cargo xtask test --kernel` builds them on the host
//! before the guest kernel, whose root file system is the host's, read-only, runs the tests.
fn main() {
    let fixtures = xtrace_tests::fixtures::fixtures();
    println!(
        "{}",
        fixtures
            .spans
            .parent()
            .expect("fixtures have a directory")
            .display()
    );
}
