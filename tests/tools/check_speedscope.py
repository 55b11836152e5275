#!/usr/bin/env python3
"""Validates a speedscope file against speedscope's published JSON schema.

    python3 tests/tools/check_speedscope.py SCHEMA FILE

Uses the `jsonschema` package when installed; otherwise a small validator of the schema
keywords speedscope's schema uses ($ref, anyOf, type, required, properties, items, const,
enum). Also checks what the schema cannot say: frame indexes in range, one weight per sample.
Prints `ok PROFILES FRAMES` or the first problem (exit 1).
"""
import json
import sys


def fail(msg):
    print("speedscope check failed: " + msg)
    sys.exit(1)


TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
}


def is_type(v, t):
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "null":
        return v is None
    return isinstance(v, TYPES[t])


def validate(schema, node, v, path):
    """Returns None when `v` matches `node`, else a message."""
    if "$ref" in node:
        name = node["$ref"].split("/")[-1]
        return validate(schema, schema["definitions"][name], v, path)
    if "anyOf" in node:
        errs = [validate(schema, n, v, path) for n in node["anyOf"]]
        if all(errs):
            return "%s matches no alternative (%s)" % (path, "; ".join(errs))
        return None
    if "type" in node:
        ts = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(is_type(v, t) for t in ts):
            return "%s is not %s" % (path, node["type"])
    if "const" in node and v != node["const"]:
        return "%s is not %r" % (path, node["const"])
    if "enum" in node and v not in node["enum"]:
        return "%s is not one of %r" % (path, node["enum"])
    if isinstance(v, dict):
        for r in node.get("required", []):
            if r not in v:
                return "%s lacks %r" % (path, r)
        for k, sub in node.get("properties", {}).items():
            if k in v:
                e = validate(schema, sub, v[k], path + "." + k)
                if e:
                    return e
    if isinstance(v, list) and "items" in node:
        for i, item in enumerate(v):
            e = validate(schema, node["items"], item, "%s[%d]" % (path, i))
            if e:
                return e
    return None


def main():
    schema = json.load(open(sys.argv[1]))
    doc = json.load(open(sys.argv[2]))
    try:
        import jsonschema
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            fail(str(e).splitlines()[0])
    except ImportError:
        top = schema.get("$ref")
        root = schema["definitions"][top.split("/")[-1]] if top else schema
        e = validate(schema, root, doc, "$")
        if e:
            fail(e)
    # The schema's root must be the file format (guards against an empty schema).
    if "FileFormat.File" not in schema.get("definitions", {}):
        fail("schema has no FileFormat.File")
    frames = doc["shared"]["frames"]
    if not doc["profiles"]:
        fail("no profiles")
    for p in doc["profiles"]:
        if p["type"] != "sampled":
            fail("profile %r is not sampled" % p["name"])
        if len(p["samples"]) != len(p["weights"]):
            fail("profile %r: %d samples, %d weights" % (p["name"], len(p["samples"]), len(p["weights"])))
        for s in p["samples"]:
            for f in s:
                if not (0 <= f < len(frames)):
                    fail("profile %r: frame index %d out of range" % (p["name"], f))
    print("ok %d %d" % (len(doc["profiles"]), len(frames)))


if __name__ == "__main__":
    main()
