//! Status messages, leaving the process, and the small C utilities GM
//! programs lean on (GM had its own so that the same code built in the
//! kernel and the firmware).

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::status::{self, GmStatus, GM_FAILURE, GM_SUCCESS};

#[no_mangle]
pub extern "C" fn gm_strerror(error: GmStatus) -> *mut c_char {
    status::message_ptr(error)
}

/// `message: text of the status` on standard error.
///
/// # Safety
/// `message` is null or a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_perror(message: *const c_char, error: GmStatus) {
    let text = status::message(error).to_string_lossy();
    if message.is_null() {
        eprintln!("{text}");
    } else {
        // SAFETY: the caller's promise.
        let m = unsafe { CStr::from_ptr(message) }.to_string_lossy();
        eprintln!("{m}: {text}");
    }
}

/// Callbacks gm_exit runs, newest first.
type OnExit = (unsafe extern "C" fn(GmStatus, *mut c_void), usize);
static ON_EXIT: Mutex<Vec<OnExit>> = Mutex::new(Vec::new());

/// # Safety
/// `callback` may be called with `arg` at gm_exit.
#[no_mangle]
pub unsafe extern "C" fn gm_on_exit(
    callback: Option<unsafe extern "C" fn(GmStatus, *mut c_void)>,
    arg: *mut c_void,
) -> GmStatus {
    let Some(f) = callback else { return GM_FAILURE };
    ON_EXIT.lock().unwrap_or_else(|e| e.into_inner()).push((f, arg as usize));
    GM_SUCCESS
}

/// Run the gm_on_exit callbacks (newest first) and exit: status 0 for
/// GM_SUCCESS, 1 otherwise.
#[no_mangle]
pub extern "C" fn gm_exit(status: GmStatus) -> ! {
    let calls = std::mem::take(&mut *ON_EXIT.lock().unwrap_or_else(|e| e.into_inner()));
    for (f, arg) in calls.into_iter().rev() {
        // SAFETY: a callback the program registered with this argument.
        unsafe { f(status, arg as *mut c_void) };
    }
    std::process::exit(if status == GM_SUCCESS { 0 } else { 1 })
}

#[no_mangle]
pub extern "C" fn gm_abort() -> ! {
    std::process::abort()
}

/// Where gm_always_assert stops.
///
/// # Safety
/// `text` and `file` are null or C strings.
#[no_mangle]
pub unsafe extern "C" fn _gm_assertion_failed(
    text: *const c_char,
    line: c_int,
    file: *const c_char,
) -> ! {
    // SAFETY: the caller's promise.
    let s = |p: *const c_char| {
        if p.is_null() {
            "?".into()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy()
        }
    };
    eprintln!("libgm: assertion failed at {}:{line}: {}", s(file), s(text));
    std::process::abort()
}

// ----- memory and strings -----

/// # Safety
/// The ranges are valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_bcopy(from: *const c_void, to: *mut c_void, len: usize) {
    // SAFETY: the caller's promise (overlap allowed, as bcopy's).
    unsafe { std::ptr::copy(from.cast::<u8>(), to.cast::<u8>(), len) }
}

/// # Safety
/// `ptr` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_bzero(ptr: *mut c_void, len: usize) {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, len) }
}

/// # Safety
/// `s` is valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_memset(s: *mut c_void, c: c_int, n: usize) -> *mut c_void {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::write_bytes(s.cast::<u8>(), c as u8, n) };
    s
}

/// # Safety
/// Both ranges are valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_memcmp(a: *const c_void, b: *const c_void, len: usize) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { libc::memcmp(a, b, len) }
}

#[no_mangle]
pub extern "C" fn gm_malloc(len: usize) -> *mut c_void {
    // SAFETY: plain C allocation; C frees it with gm_free.
    unsafe { libc::malloc(len) }
}

#[no_mangle]
pub extern "C" fn gm_calloc(len: usize, cnt: usize) -> *mut c_void {
    // SAFETY: as gm_malloc.
    unsafe { libc::calloc(len, cnt) }
}

/// # Safety
/// `ptr` is null or came from gm_malloc or gm_calloc.
#[no_mangle]
pub unsafe extern "C" fn gm_free(ptr: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { libc::free(ptr) }
}

/// `len` bytes, page aligned (gm_free_pages frees them).
#[no_mangle]
pub extern "C" fn gm_alloc_pages(len: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    // SAFETY: posix_memalign writes `p` only on success.
    match unsafe { libc::posix_memalign(&mut p, 4096, len.max(1)) } {
        0 => p,
        _ => std::ptr::null_mut(),
    }
}

/// # Safety
/// `addr` came from gm_alloc_pages.
#[no_mangle]
pub unsafe extern "C" fn gm_free_pages(addr: *mut c_void, _len: usize) {
    // SAFETY: the caller's promise.
    unsafe { libc::free(addr) }
}

#[no_mangle]
pub extern "C" fn gm_page_alloc() -> *mut c_void {
    gm_alloc_pages(4096)
}

/// # Safety
/// `addr` came from gm_page_alloc.
#[no_mangle]
pub unsafe extern "C" fn gm_page_free(addr: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { libc::free(addr) }
}

/// # Safety
/// `s` is a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_strlen(s: *const c_char) -> usize {
    // SAFETY: the caller's promise.
    unsafe { libc::strlen(s) }
}

/// # Safety
/// As C's strncpy.
#[no_mangle]
pub unsafe extern "C" fn gm_strncpy(
    to: *mut c_char,
    from: *const c_char,
    len: c_int,
) -> *mut c_char {
    // SAFETY: the caller's promise.
    unsafe { libc::strncpy(to, from, len.max(0) as usize) }
}

/// # Safety
/// As C's strcmp.
#[no_mangle]
pub unsafe extern "C" fn gm_strcmp(a: *const c_char, b: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { libc::strcmp(a, b) }
}

/// # Safety
/// As C's strncmp.
#[no_mangle]
pub unsafe extern "C" fn gm_strncmp(a: *const c_char, b: *const c_char, len: c_int) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { libc::strncmp(a, b, len.max(0) as usize) }
}

/// # Safety
/// As C's strncasecmp.
#[no_mangle]
pub unsafe extern "C" fn gm_strncasecmp(a: *const c_char, b: *const c_char, len: c_int) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { libc::strncasecmp(a, b, len.max(0) as usize) }
}

/// # Safety
/// `s` is a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_strdup(s: *const c_char) -> *mut c_char {
    // SAFETY: the caller's promise.
    unsafe { libc::strdup(s) }
}

#[no_mangle]
pub extern "C" fn gm_isprint(c: c_int) -> c_int {
    (0x20..0x7f).contains(&c) as c_int
}

/// Sixteen bytes a line: offset, hex, and the printable ones.
///
/// # Safety
/// `ptr` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_hex_dump(ptr: *const c_void, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    let b = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    for (i, line) in b.chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|x| format!("{x:02x}")).collect();
        let text: String =
            line.iter().map(|&x| if gm_isprint(x.into()) != 0 { x as char } else { '.' }).collect();
        println!("{:08x}  {:<47}  {text}", i * 16, hex.join(" "));
    }
}

#[no_mangle]
pub extern "C" fn gm_sleep(seconds: c_uint) -> c_int {
    std::thread::sleep(std::time::Duration::from_secs(seconds.into()));
    0
}

#[no_mangle]
pub extern "C" fn gm_getpid() -> u32 {
    std::process::id()
}

// ----- checksums, random numbers, logarithms -----

/// CRC-32 (the IEEE polynomial, reflected) of `len` bytes.
///
/// # Safety
/// `ptr` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_crc(ptr: *mut c_void, len: usize) -> c_ulong {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise.
    crc32(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }) as c_ulong
}

/// # Safety
/// `s` is a C string.
#[no_mangle]
pub unsafe extern "C" fn gm_crc_str(s: *const c_char) -> c_ulong {
    if s.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise.
    crc32(unsafe { CStr::from_ptr(s) }.to_bytes()) as c_ulong
}

fn crc32(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
        }
    }
    !c
}

/// The generator's state (a 32-bit linear congruential generator).
static SEED: AtomicU32 = AtomicU32::new(1);

/// A number from 0 to 2^31 - 1.
#[no_mangle]
pub extern "C" fn gm_rand() -> c_int {
    let step = |s: u32| s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
    let s = SEED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(step(s))).unwrap_or(1);
    ((step(s) >> 1) & 0x7fff_ffff) as c_int
}

#[no_mangle]
pub extern "C" fn gm_srand(seed: c_int) {
    SEED.store(seed as u32, Ordering::Relaxed);
}

#[no_mangle]
pub extern "C" fn gm_rand_mod(modulus: c_uint) -> c_uint {
    if modulus == 0 {
        return 0;
    }
    gm_rand() as c_uint % modulus
}

/// ceil(log2(n)) (0 for 0 and 1).
#[no_mangle]
pub extern "C" fn gm_log2_roundup(n: c_ulong) -> c_ulong {
    if n <= 1 {
        0
    } else {
        (c_ulong::BITS - (n - 1).leading_zeros()) as c_ulong
    }
}

const fn log2_table() -> [u8; 257] {
    let mut t = [0u8; 257];
    let mut i = 2;
    while i < 257 {
        t[i] = (usize::BITS - (i - 1).leading_zeros()) as u8;
        i += 1;
    }
    t
}

/// gm_log2_roundup of 0 to 256.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static gm_log2_roundup_table: [u8; 257] = log2_table();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_roundup_and_its_table_agree() {
        let want = [0, 0, 1, 2, 2, 3, 3, 3, 3, 4];
        for (n, &w) in want.iter().enumerate() {
            assert_eq!(gm_log2_roundup(n as c_ulong), w, "{n}");
        }
        for (n, &t) in gm_log2_roundup_table.iter().enumerate() {
            assert_eq!(t as c_ulong, gm_log2_roundup(n as c_ulong));
        }
        assert_eq!(gm_log2_roundup(1 << 40), 40);
        assert_eq!(gm_log2_roundup((1 << 40) + 1), 41);
    }

    #[test]
    fn crc32_of_the_check_string_is_the_standard_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn strerror_names_each_status() {
        // SAFETY: gm_strerror returns a static C string.
        let s = unsafe { CStr::from_ptr(gm_strerror(15)) };
        assert!(s.to_string_lossy().contains("timed out"));
    }
}
