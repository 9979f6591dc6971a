//! A firmware image as a flash file of the length it needs.
//!
//! The MCP image's `.defmt` section (linker/defmt-sram.x) is a non-loaded
//! section of about 2 GiB: defmt's interned strings are symbols whose
//! addresses are 0x8000_0000 + index, and the linker gives the section
//! the whole span from 0, zero-filled. The ELF is therefore a 2 GiB sparse
//! file (a few hundred KiB on disk), and a verbatim copy made every
//! node's `flash` show as 2 GiB in `ls -l`.
//!
//! [`pack`] writes the same ELF with `.defmt` and every other non-loaded
//! section that holds only zeros turned into a `NOBITS` section (same
//! name, address and size, no file bytes), and the other sections after
//! the loaded bytes packed one after the other. `.defmt` holds zeros but
//! for defmt's end marker in its last bytes, which nothing reads: the
//! decoder takes the strings from the symbol table (symbols in the
//! section), gdb ignores the section. The loaded segments keep their file offsets and
//! bytes, so QEMU loads the same image; the symbols, debug information
//! and the `.defmt` section header stay, so gdb and the defmt decoder
//! read it as before. Files that are not 64-bit little-endian ELFs, or
//! whose layout this does not recognise, are not packed (None).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

const EHDR: usize = 64;
const SHDR: usize = 64;
const PHDR: usize = 56;
const PT_LOAD: u32 = 1;
const SHT_NULL: u32 = 0;
const SHT_NOBITS: u32 = 8;
const SHF_ALLOC: u64 = 2;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn read_at(f: &mut File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    f.seek(SeekFrom::Start(off))?;
    f.read_exact(&mut v)?;
    Ok(v)
}

/// Does `off..off + len` of `f` hold only zeros? Holes are skipped
/// (SEEK_DATA/SEEK_HOLE), so a huge sparse range costs only its data.
fn all_zero(f: &mut File, off: u64, len: u64) -> io::Result<bool> {
    let end = off + len;
    let mut at = off;
    let mut buf = vec![0u8; 1 << 16];
    while at < end {
        let data = match rustix::fs::seek(&*f, rustix::fs::SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(e) if e == rustix::io::Errno::NXIO => return Ok(true),
            Err(_) => at,
        };
        if data >= end {
            return Ok(true);
        }
        let hole = rustix::fs::seek(&*f, rustix::fs::SeekFrom::Hole(data)).unwrap_or(end).min(end);
        f.seek(SeekFrom::Start(data))?;
        let mut left = hole - data;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            f.read_exact(&mut buf[..k])?;
            if buf[..k].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            left -= k as u64;
        }
        at = hole.max(data + 1);
    }
    Ok(true)
}

/// The name of section `i` (None when the string table does not hold it).
fn name_of(f: &mut File, sh: &[u8], shstrndx: usize, i: usize) -> io::Result<Option<Vec<u8>>> {
    if shstrndx == 0 || (shstrndx + 1) * SHDR > sh.len() {
        return Ok(None);
    }
    let t = shstrndx * SHDR;
    let (toff, tsize) = (u64_at(sh, t + 24), u64_at(sh, t + 32));
    let name = u64::from(u32_at(sh, i * SHDR));
    if name >= tsize {
        return Ok(None);
    }
    let n = (tsize - name).min(256) as usize;
    let b = read_at(f, toff + name, n)?;
    Ok(b.iter().position(|&c| c == 0).map(|end| b[..end].to_vec()))
}

/// The packed form of the ELF in `f` (`len` bytes), or None when it is not
/// one this can pack (then copy it as it is).
pub fn pack(f: &mut File, len: u64) -> io::Result<Option<Vec<u8>>> {
    if len < EHDR as u64 {
        return Ok(None);
    }
    let eh = read_at(f, 0, EHDR)?;
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Ok(None);
    }
    let (phoff, shoff) = (u64_at(&eh, 0x20), u64_at(&eh, 0x28));
    let (phentsize, phnum) = (u16_at(&eh, 0x36) as usize, u16_at(&eh, 0x38) as usize);
    let (shentsize, shnum) = (u16_at(&eh, 0x3A) as usize, u16_at(&eh, 0x3C) as usize);
    let shstrndx = u16_at(&eh, 0x3E) as usize;
    let fits = |off: u64, n: usize| off.checked_add(n as u64).is_some_and(|e| e <= len);
    if phentsize != PHDR
        || shentsize != SHDR
        || shnum == 0
        || !fits(phoff, phnum * PHDR)
        || !fits(shoff, shnum * SHDR)
    {
        return Ok(None);
    }
    let ph = read_at(f, phoff, phnum * PHDR)?;
    let mut sh = read_at(f, shoff, shnum * SHDR)?;
    // Everything up to the end of the headers and the loaded bytes stays
    // where it is.
    let mut keep = (EHDR as u64).max(phoff + (phnum * PHDR) as u64);
    for i in 0..phnum {
        let p = &ph[i * PHDR..];
        if u32_at(p, 0) == PT_LOAD {
            let Some(end) = u64_at(p, 8).checked_add(u64_at(p, 32)) else { return Ok(None) };
            keep = keep.max(end);
        }
    }
    for i in 0..shnum {
        let s = &sh[i * SHDR..];
        if u64_at(s, 8) & SHF_ALLOC != 0 && u32_at(s, 4) != SHT_NOBITS {
            keep = keep.max(u64_at(s, 24).saturating_add(u64_at(s, 32)));
        }
    }
    if keep > len || keep >= shoff {
        return Ok(None);
    }
    let mut out = read_at(f, 0, keep as usize)?;
    // The other sections, in file order, packed after `keep`.
    let mut order: Vec<usize> = (1..shnum).collect();
    order.sort_by_key(|&i| u64_at(&sh, i * SHDR + 24));
    let mut moved: Vec<(u64, u64, u64)> = Vec::new(); // (old offset, size, new offset)
    for i in order {
        let s = i * SHDR;
        let (kind, flags) = (u32_at(&sh, s + 4), u64_at(&sh, s + 8));
        let (off, size) = (u64_at(&sh, s + 24), u64_at(&sh, s + 32));
        if kind == SHT_NULL || kind == SHT_NOBITS || size == 0 {
            continue;
        }
        if off < keep {
            if off + size > keep {
                return Ok(None); // straddles the kept bytes
            }
            continue;
        }
        if off.checked_add(size).is_none_or(|e| e > len) {
            return Ok(None);
        }
        let name = name_of(f, &sh, shstrndx, i)?;
        if flags & SHF_ALLOC == 0
            && (name.as_deref() == Some(&b".defmt"[..]) || all_zero(f, off, size)?)
        {
            put_u32(&mut sh, s + 4, SHT_NOBITS);
            put_u64(&mut sh, s + 24, out.len() as u64);
            continue;
        }
        let align = u64_at(&sh, s + 48).max(1);
        let at = (out.len() as u64).next_multiple_of(align);
        out.resize(at as usize, 0);
        let Ok(n) = usize::try_from(size) else { return Ok(None) };
        out.extend_from_slice(&read_at(f, off, n)?);
        put_u64(&mut sh, s + 24, at);
        moved.push((off, size, at));
    }
    // Program headers that are not loaded but name file bytes (e.g.
    // RISCV_ATTRIBUTES) follow their section.
    for i in 0..phnum {
        let p = phoff as usize + i * PHDR;
        let (kind, off, filesz) = (u32_at(&out, p), u64_at(&out, p + 8), u64_at(&out, p + 32));
        if kind == PT_LOAD || filesz == 0 || off + filesz <= keep {
            continue;
        }
        let Some(&(old, _, new)) =
            moved.iter().find(|&&(o, size, _)| o <= off && off + filesz <= o + size)
        else {
            return Ok(None);
        };
        put_u64(&mut out, p + 8, new + (off - old));
    }
    let at = (out.len() as u64).next_multiple_of(8);
    out.resize(at as usize, 0);
    out.extend_from_slice(&sh);
    put_u64(&mut out, 0x28, at);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const GIB: u64 = 1 << 30;

    /// A sparse test ELF: a loaded .text (0x1000, 0x100 bytes of 0xAA), a
    /// .defmt of 1 GiB (a hole but for its last 8 bytes), .attrs (16 bytes, named by a
    /// non-loaded program header) and .shstrtab after it, then the section
    /// headers. Returns (file, section offsets, shstrtab bytes).
    fn sparse_elf(path: &std::path::Path) -> (File, Vec<u8>) {
        let names = b"\0.text\0.defmt\0.attrs\0.shstrtab\0".to_vec();
        let attrs_off = 0x2000 + GIB;
        let str_off = attrs_off + 16;
        let sh_off = (str_off + names.len() as u64).next_multiple_of(8);
        let mut eh = vec![0u8; EHDR];
        eh[..4].copy_from_slice(b"\x7fELF");
        (eh[4], eh[5], eh[6]) = (2, 1, 1);
        eh[16] = 2;
        eh[18] = 0xF3;
        put_u64(&mut eh, 0x20, EHDR as u64);
        put_u64(&mut eh, 0x28, sh_off);
        eh[0x36] = PHDR as u8;
        eh[0x38] = 2;
        eh[0x3A] = SHDR as u8;
        eh[0x3C] = 5;
        eh[0x3E] = 4;
        let mut ph = vec![0u8; 2 * PHDR];
        put_u32(&mut ph, 0, PT_LOAD);
        put_u64(&mut ph, 8, 0x1000);
        put_u64(&mut ph, 32, 0x100);
        put_u64(&mut ph, 40, 0x100);
        put_u32(&mut ph, PHDR, 0x7000_0003);
        put_u64(&mut ph, PHDR + 8, attrs_off);
        put_u64(&mut ph, PHDR + 32, 16);
        let mut sh = vec![0u8; 5 * SHDR];
        // (name, type, flags, addr, offset, size, align)
        let secs = [
            (1, 1, SHF_ALLOC | 4, 0x8000_0000, 0x1000, 0x100, 4),
            (7, 1, 0, 0, 0x2000, GIB, 8),
            (14, 0x7000_0003, 0, 0, attrs_off, 16, 1),
            (21, 3, 0, 0, str_off, names.len() as u64, 1),
        ];
        for (i, (name, kind, flags, addr, off, size, align)) in secs.into_iter().enumerate() {
            let s = (i + 1) * SHDR;
            put_u32(&mut sh, s, name);
            put_u32(&mut sh, s + 4, kind);
            put_u64(&mut sh, s + 8, flags);
            put_u64(&mut sh, s + 16, addr);
            put_u64(&mut sh, s + 24, off);
            put_u64(&mut sh, s + 32, size);
            put_u64(&mut sh, s + 48, align);
        }
        let mut f =
            File::options().read(true).write(true).create(true).truncate(true).open(path).unwrap();
        let mut at = |off: u64, b: &[u8]| {
            f.seek(SeekFrom::Start(off)).unwrap();
            f.write_all(b).unwrap();
        };
        at(0, &eh);
        at(EHDR as u64, &ph);
        at(0x1000, &[0xAA; 0x100]);
        // Like the image's: zeros but for an end marker in the last bytes.
        at(0x2000 + GIB - 8, &0x8000_0010u64.to_le_bytes());
        at(attrs_off, &[7u8; 16]);
        at(str_off, &names);
        at(sh_off, &sh);
        (File::open(path).unwrap(), names)
    }

    #[test]
    fn a_zero_section_takes_no_bytes_and_everything_else_is_where_its_headers_say() {
        let path = std::env::temp_dir().join(format!("elfpack-{}", std::process::id()));
        let (mut f, names) = sparse_elf(&path);
        let len = f.metadata().unwrap().len();
        assert!(len > GIB);
        let out = pack(&mut f, len).unwrap().expect("an ELF it packs");
        std::fs::remove_file(&path).unwrap();
        assert!(out.len() < 0x2000, "{} bytes", out.len());
        // Headers and loaded bytes in place.
        assert_eq!(out[..4], *b"\x7fELF");
        assert_eq!(out[0x1000..0x1100], [0xAA; 0x100]);
        let shoff = u64_at(&out, 0x28) as usize;
        assert_eq!(shoff % 8, 0);
        let sec = |i: usize| {
            let s = shoff + i * SHDR;
            (u32_at(&out, s + 4), u64_at(&out, s + 16), u64_at(&out, s + 24), u64_at(&out, s + 32))
        };
        assert_eq!(sec(1), (1, 0x8000_0000, 0x1000, 0x100), ".text untouched");
        let (kind, addr, _, size) = sec(2);
        assert_eq!((kind, addr, size), (SHT_NOBITS, 0, GIB), ".defmt: NOBITS, same size");
        let (_, _, attrs, size) = sec(3);
        assert_eq!(&out[attrs as usize..(attrs + size) as usize], &[7u8; 16]);
        let (_, _, strs, size) = sec(4);
        assert_eq!(&out[strs as usize..(strs + size) as usize], &names[..]);
        assert_eq!(
            u64_at(&out, EHDR + PHDR + 8),
            attrs,
            "the attributes segment follows its section"
        );
        assert_eq!(u64_at(&out, EHDR + 8), 0x1000, "the loaded segment stays");
    }

    #[test]
    fn what_is_not_a_64_bit_little_endian_elf_is_left_alone() {
        let path = std::env::temp_dir().join(format!("elfpack-raw-{}", std::process::id()));
        std::fs::write(&path, [0x13u8; 4096]).unwrap();
        let mut f = File::open(&path).unwrap();
        assert_eq!(pack(&mut f, 4096).unwrap(), None);
        let mut b = vec![0u8; 4096];
        b[..6].copy_from_slice(b"\x7fELF\x01\x01");
        std::fs::write(&path, &b).unwrap();
        let mut f = File::open(&path).unwrap();
        assert_eq!(pack(&mut f, 4096).unwrap(), None, "32-bit");
        std::fs::remove_file(&path).unwrap();
    }
}
