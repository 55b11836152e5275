//! The symbol table: JIT-compiled method address ranges and module names.

use std::ops::Range;

use super::hash::FxHashMap;

/// The name of a frame no method covers (TraceEvent prints `?!?`).
pub const UNRESOLVED_FRAME: &str = "?!?";

/// One method record as MethodLoadVerbose and MethodDC*Verbose carry it. Strings are the raw
/// UTF-16LE bytes of the payload (without the terminating NUL): they are decoded only when a
/// sample hits the method.
#[derive(Debug, Clone, Copy)]
pub struct MethodRecord<'a> {
    /// MethodID.
    pub method_id: u64,
    /// ModuleID (joins the module's IL path).
    pub module_id: u64,
    /// First byte of the method's native code.
    pub start: u64,
    /// Native code size in bytes.
    pub size: u32,
    /// MethodNamespace (the full type name), UTF-16LE.
    pub namespace: &'a [u8],
    /// MethodName, UTF-16LE.
    pub name: &'a [u8],
    /// MethodSignature (e.g. `void  (int32)`), UTF-16LE.
    pub signature: &'a [u8],
}

#[derive(Debug, Clone)]
struct Method {
    start: u64,
    end: u64,
    module_id: u64,
    /// namespace, name, signature: byte ranges in `SymbolTable::strings`.
    strings: [Range<u32>; 3],
}

/// Method address ranges (binary search) and module names, with lazily built frame names.
///
/// Fed by live `Method/LoadVerbose` events and the end-of-session rundown
/// (`MethodDCStartVerbose` / `MethodDCEndVerbose`), and by ModuleLoad / ModuleDC* /
/// DomainModuleDC* for module names. Memory: one record (plus its raw name bytes) per distinct
/// method and one name per module; frame names exist only for methods samples hit.
#[derive(Debug, Default, Clone)]
pub struct SymbolTable {
    methods: Vec<Method>,
    sorted: bool,
    strings: Vec<u8>,
    /// (start, end) -> index in `methods`, to drop the rundown's repeats of live records.
    seen: FxHashMap<(u64, u64), ()>,
    modules: FxHashMap<u64, String>,
}

fn utf16(bytes: &[u8]) -> String {
    let units = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0);
    char::decode_utf16(units)
        .map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// `C:\path\System.Private.CoreLib.dll` or `/usr/x/Foo.dll` -> `System.Private.CoreLib`.
fn module_short_name(path: &str) -> String {
    let file = path.rsplit(&['/', '\\'][..]).next().unwrap_or(path);
    let stem = match file.rfind('.') {
        Some(i) if i > 0 => &file[..i],
        _ => file,
    };
    stem.to_string()
}

impl SymbolTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a method (a repeat of a known address range is ignored; an empty one too).
    pub fn add_method(&mut self, m: &MethodRecord<'_>) {
        if m.size == 0 {
            return;
        }
        let end = m.start.saturating_add(u64::from(m.size));
        if self.seen.insert((m.start, end), ()).is_some() {
            return;
        }
        let mut push = |s: &[u8]| {
            let a = self.strings.len() as u32;
            self.strings.extend_from_slice(s);
            a..self.strings.len() as u32
        };
        let strings = [push(m.namespace), push(m.name), push(m.signature)];
        if let Some(last) = self.methods.last() {
            if last.start > m.start {
                self.sorted = false;
            }
        } else {
            self.sorted = true;
        }
        self.methods.push(Method {
            start: m.start,
            end,
            module_id: m.module_id,
            strings,
        });
    }

    /// Records a module's IL path (ModuleLoad, ModuleDC*, DomainModuleDC*); the frame names
    /// use its file name without extension. The first name given for an id is kept.
    pub fn add_module(&mut self, module_id: u64, il_path: &str) {
        self.modules
            .entry(module_id)
            .or_insert_with(|| module_short_name(il_path));
    }

    /// True if module `module_id` has a name already.
    pub fn has_module(&self, module_id: u64) -> bool {
        self.modules.contains_key(&module_id)
    }

    /// Methods known.
    pub fn methods(&self) -> usize {
        self.methods.len()
    }

    /// Modules known.
    pub fn modules(&self) -> usize {
        self.modules.len()
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.methods.sort_by_key(|m| m.start);
            self.sorted = true;
        }
    }

    /// The method covering `ip` (an index for [`frame_name`](Self::frame_name)), if any.
    pub fn resolve(&mut self, ip: u64) -> Option<usize> {
        self.sort();
        let i = self.methods.partition_point(|m| m.start <= ip);
        if i == 0 {
            return None;
        }
        let m = &self.methods[i - 1];
        if ip < m.end {
            Some(i - 1)
        } else {
            None
        }
    }

    /// The frame name of method `index`, as TraceEvent prints it:
    /// `{IL file name without extension}!{MethodNamespace}.{MethodName}{signature from '('}`,
    /// e.g. `System.Private.CoreLib!System.Threading.Thread.Sleep(int32)`; the module is `?`
    /// when no module event named it.
    pub fn frame_name(&self, index: usize) -> String {
        let m = match self.methods.get(index) {
            Some(m) => m,
            None => return UNRESOLVED_FRAME.to_string(),
        };
        let s = |r: &Range<u32>| utf16(&self.strings[r.start as usize..r.end as usize]);
        let namespace = s(&m.strings[0]);
        let name = s(&m.strings[1]);
        let signature = s(&m.strings[2]);
        let module = self.modules.get(&m.module_id).map_or("?", |s| s.as_str());
        let mut out = String::with_capacity(module.len() + namespace.len() + name.len() + 16);
        out.push_str(module);
        out.push('!');
        if !namespace.is_empty() {
            out.push_str(&namespace);
            out.push('.');
        }
        out.push_str(&name);
        if let Some(i) = signature.find('(') {
            out.push_str(&signature[i..]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16le(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn resolves_ranges_and_names() {
        let mut t = SymbolTable::new();
        let (ns, name, sig) = (
            u16le("System.Threading.Thread"),
            u16le("Sleep"),
            u16le("void  (int32)"),
        );
        let sleep = MethodRecord {
            method_id: 1,
            module_id: 10,
            start: 0x2000,
            size: 0x10,
            namespace: &ns,
            name: &name,
            signature: &sig,
        };
        t.add_method(&sleep);
        let other = u16le("Other");
        t.add_method(&MethodRecord {
            method_id: 2,
            module_id: 11,
            start: 0x1000,
            size: 0x100,
            namespace: &[],
            name: &other,
            signature: &[],
        });
        // The rundown repeats the first one.
        t.add_method(&sleep);
        assert_eq!(t.methods(), 2);
        t.add_module(10, "C:\\Program Files\\dotnet\\System.Private.CoreLib.dll");
        let i = t.resolve(0x200f).unwrap();
        assert_eq!(
            t.frame_name(i),
            "System.Private.CoreLib!System.Threading.Thread.Sleep(int32)"
        );
        assert_eq!(t.resolve(0x2010), None);
        assert_eq!(t.resolve(0xfff), None);
        let j = t.resolve(0x1000).unwrap();
        assert_eq!(t.frame_name(j), "?!Other");
    }
}
