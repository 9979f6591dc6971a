//! Builds the C part of libgm (the calls with C variadic arguments).

fn main() {
    println!("cargo:rerun-if-changed=csrc/varargs.c");
    println!("cargo:rerun-if-changed=include/gm.h");
    cc::Build::new().file("csrc/varargs.c").include("include").warnings(true).compile("gm_varargs");
}
