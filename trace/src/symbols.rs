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
    /// MethodToken (the method's metadata token in its module; 0 for dynamic methods).
    pub token: u32,
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
    token: u32,
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
            token: m.token,
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

    /// The parts of method `index`'s name (module, type, method, signature, token), if
    /// there is such a method.
    pub fn method_name(&self, index: usize) -> Option<MethodName> {
        let m = self.methods.get(index)?;
        let s = |r: &Range<u32>| utf16(&self.strings[r.start as usize..r.end as usize]);
        Some(MethodName {
            module: self.modules.get(&m.module_id).cloned(),
            type_name: s(&m.strings[0]),
            method: s(&m.strings[1]),
            signature: s(&m.strings[2]),
            token: m.token,
        })
    }

    /// The frame name of method `index` ([`MethodName::frame_name`]), or
    /// [`UNRESOLVED_FRAME`] for an index no method has.
    pub fn frame_name(&self, index: usize) -> String {
        match self.method_name(index) {
            Some(m) => m.frame_name(),
            None => UNRESOLVED_FRAME.to_string(),
        }
    }
}

/// A method's name in parts, as the runtime's method and module records give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// The module's IL file name without extension (`System.Private.CoreLib`); `None` when
    /// no module event named it.
    pub module: Option<String>,
    /// MethodNamespace: the declaring type's full name (`System.Threading.Thread`; nested
    /// types joined with `+`, generic arguments as the runtime writes them).
    pub type_name: String,
    /// MethodName (`Sleep`).
    pub method: String,
    /// MethodSignature (`void  (int32)`): return type, then the parameter types.
    pub signature: String,
    /// MethodToken: the method's metadata token in its module (0 for dynamic methods).
    pub token: u32,
}

impl MethodName {
    /// The frame name as TraceEvent prints it:
    /// `{IL file name without extension}!{MethodNamespace}.{MethodName}{signature from '('}`,
    /// e.g. `System.Private.CoreLib!System.Threading.Thread.Sleep(int32)`; the module is `?`
    /// when no module event named it.
    pub fn frame_name(&self) -> String {
        let module = self.module.as_deref().unwrap_or("?");
        let mut out =
            String::with_capacity(module.len() + self.type_name.len() + self.method.len() + 16);
        out.push_str(module);
        out.push('!');
        if !self.type_name.is_empty() {
            out.push_str(&self.type_name);
            out.push('.');
        }
        out.push_str(&self.method);
        if let Some(i) = self.signature.find('(') {
            out.push_str(&self.signature[i..]);
        }
        out
    }

    /// The parameter types of the signature, as the runtime writes them (`int32`,
    /// `class System.String`, `class System.Collections.Generic.List<int32>`): the text between the
    /// first `(` and its `)`, split at the commas outside `<>`, `[]` and `()`. Empty for a
    /// method without parameters (or without a signature).
    pub fn parameter_types(&self) -> Vec<String> {
        let open = match self.signature.find('(') {
            Some(i) => i,
            None => return Vec::new(),
        };
        let mut out = Vec::new();
        let mut depth = 0usize;
        let mut current = String::new();
        for c in self.signature[open + 1..].chars() {
            match c {
                ')' if depth == 0 => break,
                '<' | '[' | '(' => depth += 1,
                '>' | ']' | ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    out.push(current.trim().to_string());
                    current.clear();
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        let last = current.trim();
        if !last.is_empty() || !out.is_empty() {
            out.push(last.to_string());
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
            token: 0x0600_0001,
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
            token: 0,
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
        let m = t.method_name(i).unwrap();
        assert_eq!(m.module.as_deref(), Some("System.Private.CoreLib"));
        assert_eq!(m.type_name, "System.Threading.Thread");
        assert_eq!(m.method, "Sleep");
        assert_eq!(m.token, 0x0600_0001);
        assert_eq!(m.parameter_types(), vec!["int32"]);
        assert_eq!(t.method_name(j).unwrap().module, None);
        assert_eq!(t.method_name(99), None);
    }

    #[test]
    fn parameter_types_split_at_top_level_commas() {
        let with = |signature: &str| MethodName {
            module: None,
            type_name: String::new(),
            method: String::new(),
            signature: signature.to_string(),
            token: 0,
        };
        assert!(with("void  ()").parameter_types().is_empty());
        assert!(with("").parameter_types().is_empty());
        assert_eq!(
            with("bool  (class System.Collections.Generic.Dictionary`2<class System.String,int32>,value class X[,],int32*)")
                .parameter_types(),
            vec![
                "class System.Collections.Generic.Dictionary`2<class System.String,int32>",
                "value class X[,]",
                "int32*"
            ]
        );
    }
}
