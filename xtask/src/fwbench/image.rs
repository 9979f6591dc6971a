//! The measuring image as the bench reads it: where its counters lie in
//! the guest's RAM (the addresses of the `poll_stats` statics from the
//! ELF's symbols) and the layout of `mcp::Work` (each field's name,
//! offset and width from the image's DWARF), so a reading of the guest's
//! RAM file becomes counts without this module knowing the struct.
//!
//! Owns nothing but what it reads from the ELF.

use std::path::{Path, PathBuf};

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSymbol};

/// QEMU virt's RAM base: guest address A lies at offset A - RAM_BASE of
/// the node's `sram` file (its RAM's memory backend).
pub const RAM_BASE: u64 = 0x8000_0000;

/// One field of `mcp::Work`: `count` elements of `width` bytes (1 for a
/// plain integer) at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u64,
    pub width: u64,
    /// Array fields: the number of elements; None for a plain integer.
    pub count: Option<u64>,
}

/// What the bench needs of the image.
#[derive(Debug, Clone)]
pub struct Image {
    pub elf: PathBuf,
    /// Guest address of `POLL_STATS: [[u64; 4]; 2]`.
    pub poll_stats: u64,
    /// Guest address of `POLL_WORK: mcp::Work`, and the struct's size.
    pub poll_work: u64,
    /// Guest address of `POLL_KINDS: [[[u64; 2]; 2]; 3]` (passes by kind,
    /// idle then busy: count, instructions); None in an older image.
    pub poll_kinds: Option<u64>,
    /// Guest address of `POLL_CAUSES: [[[u64; 2]; 2]; 256]` (passes by
    /// kind and cause, idle then busy: count, instructions); None in an
    /// older image.
    pub poll_causes: Option<u64>,
    pub work_size: u64,
    pub work_fields: Vec<Field>,
    /// The end of the code (`.text`), a guest address.
    pub code_end: u64,
}

impl Image {
    pub fn load(elf: &Path) -> crate::Result<Image> {
        let file = std::fs::File::open(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
        // SAFETY: mapped read-only and only parsed; an image is replaced
        // by a new file (cargo writes anew), never rewritten in place
        // while the bench reads it.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot map {}: {e}", elf.display()))?;
        let obj = object::File::parse(&*map).map_err(|e| format!("{}: {e}", elf.display()))?;
        let poll_stats = symbol(&obj, "POLL_STATS").map_err(|e| no_stats(elf, e))?;
        let poll_work = symbol(&obj, "POLL_WORK").map_err(|e| no_stats(elf, e))?;
        let poll_kinds = symbol(&obj, "POLL_KINDS").ok();
        let poll_causes = symbol(&obj, "POLL_CAUSES").ok();
        let (work_size, work_fields) =
            work_layout(&obj).map_err(|e| format!("{}: {e}", elf.display()))?;
        let code_end = obj
            .section_by_name(".text")
            .map(|s| s.address() + s.size())
            .ok_or_else(|| format!("{}: no .text", elf.display()))?;
        Ok(Image {
            elf: elf.to_path_buf(),
            poll_stats,
            poll_work,
            poll_kinds,
            poll_causes,
            work_size,
            work_fields,
            code_end,
        })
    }
}

fn no_stats(elf: &Path, e: String) -> String {
    format!(
        "{}: {e}: not an image with the instruction counter (build it with the `poll-stats` feature)",
        elf.display()
    )
}

/// The address of the symbol `name`.
pub fn symbol<'a>(obj: &object::File<'a>, name: &str) -> crate::Result<u64> {
    obj.symbols()
        .find(|s| s.name() == Ok(name))
        .map(|s| s.address())
        .ok_or_else(|| format!("no symbol {name}"))
}

/// The offset of guest address `addr` in a node's RAM file.
pub fn file_offset(addr: u64) -> crate::Result<u64> {
    addr.checked_sub(RAM_BASE)
        .ok_or_else(|| format!("guest address {addr:#x} is below RAM ({RAM_BASE:#x})"))
}

type Slice<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// The DWARF of `obj`, borrowing its sections.
pub fn dwarf<'a>(obj: &'a object::File<'a>) -> crate::Result<gimli::Dwarf<Slice<'a>>> {
    let load = |id: gimli::SectionId| -> Result<Slice<'a>, gimli::Error> {
        let data = obj.section_by_name(id.name()).and_then(|s| s.data().ok()).unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, gimli::RunTimeEndian::Little))
    };
    gimli::Dwarf::load(load).map_err(|e| format!("DWARF: {e}"))
}

/// `mcp::Work`'s size and fields, from the DWARF: the structure type named
/// `Work` inside the namespace `mcp`, or inside its module `work` (where
/// it is defined; `mcp::Work` re-exports it).
fn work_layout(obj: &object::File<'_>) -> crate::Result<(u64, Vec<Field>)> {
    let dwarf = dwarf(obj)?;
    let err = |e: gimli::Error| format!("DWARF: {e}");
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(err)? {
        let unit = dwarf.unit(header).map_err(err)?;
        let mut tree = unit.entries_tree(None).map_err(err)?;
        let root = tree.root().map_err(err)?;
        let mut children = root.children();
        while let Some(node) = children.next().map_err(err)? {
            let e = node.entry();
            if e.tag() != gimli::DW_TAG_namespace || name_of(&dwarf, &unit, e)? != "mcp" {
                continue;
            }
            if let Some(found) = work_in(&dwarf, &unit, node, true)? {
                return Ok(found);
            }
        }
    }
    Err("no mcp::Work in the image's DWARF (built without debug information?)".into())
}

/// `Work`'s layout among the children of namespace `node` (`nested`: and
/// in its child namespace `work`), if it is defined there.
fn work_in(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    node: gimli::EntriesTreeNode<'_, '_, '_, Slice<'_>>,
    nested: bool,
) -> crate::Result<Option<(u64, Vec<Field>)>> {
    let err = |e: gimli::Error| format!("DWARF: {e}");
    let mut inner = node.children();
    while let Some(n) = inner.next().map_err(err)? {
        let e = n.entry();
        if nested && e.tag() == gimli::DW_TAG_namespace && name_of(dwarf, unit, e)? == "work" {
            if let Some(found) = work_in(dwarf, unit, n, false)? {
                return Ok(Some(found));
            }
            continue;
        }
        if e.tag() != gimli::DW_TAG_structure_type || name_of(dwarf, unit, e)? != "Work" {
            continue;
        }
        if e.attr_value(gimli::DW_AT_declaration).map_err(err)?.is_some() {
            continue;
        }
        let size = udata(e, gimli::DW_AT_byte_size)?.ok_or("mcp::Work without a size")?;
        let mut fields = Vec::new();
        let mut members = n.children();
        while let Some(m) = members.next().map_err(err)? {
            let m = m.entry();
            if m.tag() != gimli::DW_TAG_member {
                continue;
            }
            let name = name_of(dwarf, unit, m)?;
            let offset = udata(m, gimli::DW_AT_data_member_location)?
                .ok_or_else(|| format!("mcp::Work.{name} without an offset"))?;
            let (width, count) =
                member_type(unit, m).map_err(|e| format!("mcp::Work.{name}: {e}"))?;
            fields.push(Field { name, offset, width, count });
        }
        if fields.is_empty() {
            return Err("mcp::Work has no fields in the DWARF".into());
        }
        return Ok(Some((size, fields)));
    }
    Ok(None)
}

fn name_of(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    e: &gimli::DebuggingInformationEntry<Slice<'_>>,
) -> crate::Result<String> {
    match e.attr_value(gimli::DW_AT_name).map_err(|e| format!("DWARF: {e}"))? {
        Some(v) => Ok(dwarf
            .attr_string(unit, v)
            .map_err(|e| format!("DWARF: {e}"))?
            .to_string_lossy()
            .into_owned()),
        None => Ok(String::new()),
    }
}

fn udata(
    e: &gimli::DebuggingInformationEntry<Slice<'_>>,
    at: gimli::DwAt,
) -> crate::Result<Option<u64>> {
    Ok(e.attr_value(at).map_err(|e| format!("DWARF: {e}"))?.and_then(|v| v.udata_value()))
}

/// A member's element width and (for an array) count: its type is a
/// base type or an array of one.
fn member_type(
    unit: &gimli::Unit<Slice<'_>>,
    m: &gimli::DebuggingInformationEntry<Slice<'_>>,
) -> crate::Result<(u64, Option<u64>)> {
    let err = |e: gimli::Error| format!("DWARF: {e}");
    let target = |e: &gimli::DebuggingInformationEntry<Slice<'_>>| -> crate::Result<_> {
        match e.attr_value(gimli::DW_AT_type).map_err(err)? {
            Some(gimli::AttributeValue::UnitRef(o)) => Ok(o),
            _ => Err("a member whose type is not in its unit".to_string()),
        }
    };
    let t = unit.entry(target(m)?).map_err(err)?;
    match t.tag() {
        gimli::DW_TAG_base_type => {
            Ok((udata(&t, gimli::DW_AT_byte_size)?.ok_or("a base type without a size")?, None))
        }
        gimli::DW_TAG_array_type => {
            let elem = unit.entry(target(&t)?).map_err(err)?;
            let width = udata(&elem, gimli::DW_AT_byte_size)?.ok_or("an element without a size")?;
            let mut tree = unit.entries_tree(Some(t.offset())).map_err(err)?;
            let root = tree.root().map_err(err)?;
            let mut subs = root.children();
            while let Some(s) = subs.next().map_err(err)? {
                let s = s.entry();
                if s.tag() == gimli::DW_TAG_subrange_type {
                    if let Some(n) = udata(s, gimli::DW_AT_count)? {
                        return Ok((width, Some(n)));
                    }
                    if let Some(u) = udata(s, gimli::DW_AT_upper_bound)? {
                        return Ok((width, Some(u + 1)));
                    }
                }
            }
            Err("an array without a length".into())
        }
        t => Err(format!("a member of type tag {t} (not an integer or an array of them)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbol_is_found_by_name_and_a_missing_one_is_named() {
        // This test binary is an ELF with a symbol table.
        let me = std::env::current_exe().unwrap();
        let file = std::fs::File::open(&me).unwrap();
        // SAFETY: a read-only map of this test's own executable.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let obj = object::File::parse(&*map).unwrap();
        assert!(symbol(&obj, "main").unwrap() > 0);
        let e = symbol(&obj, "POLL_STATS_NOT_HERE").unwrap_err();
        assert!(e.contains("POLL_STATS_NOT_HERE"), "{e}");
    }

    #[test]
    fn guest_addresses_map_to_ram_file_offsets() {
        assert_eq!(file_offset(RAM_BASE + 0x4_3000), Ok(0x4_3000));
        assert!(file_offset(0x1000).is_err());
    }

    #[test]
    fn an_image_without_the_counter_is_refused_saying_how_to_build_one() {
        let me = std::env::current_exe().unwrap();
        let e = Image::load(&me).unwrap_err();
        assert!(e.contains("poll-stats"), "{e}");
    }
}
