"""Avro schema resolution as a compatibility check: can data written with one schema be read with another?

Pulsar decides the compatibility of AVRO and JSON schemas with Avro's resolving grammar
(its ``canRead`` / ``mutualRead`` validators): a reader can read a writer when resolving
the two leaves no error that some data could meet. That is the resolution of the Avro
specification with the particulars of Avro's Java implementation, which Pulsar inherits:

- records are matched field by field, by name (after the reader's aliases), whatever the
  records themselves are called; a writer field the reader lacks is skipped, a reader
  field the writer lacks needs a default;
- enums and fixed need the same unqualified name, fixed the same size; enum symbols are
  not compared (a symbol the reader lacks fails only when such a value is read, or
  takes the reader's default);
- a writer union is readable when each of its branches is (an identical union always is);
- a reader union reads a non-union writer through its first matching branch: the same
  type (a named type by full name, a record also by structure), else a promotion;
- promotions: int to long, float or double; long to float or double; float to double;
  string to bytes and bytes to string. Logical types resolve as their underlying types.

The schemas are the ``avro`` library's parsed schemas; only the resolution is here.
"""

from __future__ import annotations

from avro.schema import Schema

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "enum", "fixed"})
#: (writer type, reader type) pairs a reader takes by promotion.
_PROMOTIONS = frozenset({("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                         ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")})


def can_read(reader: Schema, writer: Schema) -> bool:
    """True if data written with ``writer`` can always be read with ``reader``."""
    return _Resolution(reader).readable(writer, reader)


def _qualified(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _short(fullname: str) -> str:
    return fullname.rsplit(".", 1)[-1]


class _Resolution:
    """One resolution of a reader against a writer: the reader's aliases and the record pairs met so far."""

    def __init__(self, reader: Schema) -> None:
        self.type_aliases: dict[str, str] = {}  # an alias of a reader's named type -> that type's full name
        self.field_aliases: dict[str, dict[str, str]] = {}  # reader record -> {field alias: field name}
        self.records: dict[tuple[int, int], bool] = {}
        self._collect_aliases(reader, set())

    def _collect_aliases(self, schema: Schema, visited: set[int]) -> None:
        if id(schema) in visited:
            return
        visited.add(id(schema))
        kind = schema.type
        if kind in _NAMED:
            namespace = schema.fullname.rpartition(".")[0] or None
            for alias in schema.props.get("aliases") or ():
                self.type_aliases[_qualified(alias, namespace)] = schema.fullname
        if kind == "record":
            fields = self.field_aliases.setdefault(schema.fullname, {})
            for f in schema.fields:
                for alias in f.props.get("aliases") or ():
                    fields[alias] = f.name
                self._collect_aliases(f.type, visited)
        elif kind == "union":
            for branch in schema.schemas:
                self._collect_aliases(branch, visited)
        elif kind == "array":
            self._collect_aliases(schema.items, visited)
        elif kind == "map":
            self._collect_aliases(schema.values, visited)

    def _fullname(self, writer: Schema) -> str:
        """A writer's named type's full name, as the reader's aliases rename it."""
        return self.type_aliases.get(writer.fullname, writer.fullname)

    def _writer_fields(self, writer: Schema) -> dict:
        renamed = self.field_aliases.get(self._fullname(writer), {})
        return {renamed.get(f.name, f.name): f for f in writer.fields}

    # -- resolution ---------------------------------------------------------------------
    def readable(self, writer: Schema, reader: Schema) -> bool:
        wt, rt = writer.type, reader.type
        if wt == "union":
            if self._equivalent(writer, reader, {}):
                return True
            return all(self.readable(branch, reader) for branch in writer.schemas)
        if wt == rt:
            if wt in _PRIMITIVES:
                return True
            if wt == "fixed":
                return _short(self._fullname(writer)) == reader.name and writer.size == reader.size
            if wt == "enum":
                return _short(self._fullname(writer)) == reader.name
            if wt == "array":
                return self.readable(writer.items, reader.items)
            if wt == "map":
                return self.readable(writer.values, reader.values)
            return self._records(writer, reader)
        if rt == "union":
            branch = self._first_match(writer, reader)
            return branch is not None and self.readable(writer, branch)
        return (wt, rt) in _PROMOTIONS

    def _records(self, writer: Schema, reader: Schema) -> bool:
        key = (id(writer), id(reader))
        if key in self.records:
            return self.records[key]  # a recursive pair is judged where it was first met
        self.records[key] = True
        fields = self._writer_fields(writer)
        ok = True
        for rf in reader.fields:
            wf = fields.get(rf.name)
            if wf is None:
                if not rf.has_default:
                    ok = False
                    break
            elif not self.readable(wf.type, rf.type):
                ok = False
                break
        self.records[key] = ok
        return ok

    def _first_match(self, writer: Schema, union: Schema) -> Schema | None:
        """The branch of a reader's union that reads a (non-union) writer, as Avro picks it."""
        wt = writer.type
        structural = None
        for branch in union.schemas:
            if branch.type != wt:
                continue
            if wt not in _NAMED:
                return branch
            fullname = self._fullname(writer)
            if fullname == branch.fullname:
                return branch
            if wt == "record" and not self._shallow_error(writer, branch) and (
                    structural is None or _short(fullname) == branch.name):
                structural = branch
        if structural is not None:
            return structural
        return next((b for b in union.schemas if (wt, b.type) in _PROMOTIONS), None)

    def _shallow_error(self, writer: Schema, reader: Schema) -> bool:
        """Whether records fail to match at their own level or their fields' (Avro's structure match)."""
        fields = self._writer_fields(writer)
        if any(rf.name not in fields and not rf.has_default for rf in reader.fields):
            return True
        return any(self._immediate_error(fields[rf.name].type, rf.type) for rf in reader.fields if rf.name in fields)

    def _immediate_error(self, writer: Schema, reader: Schema) -> bool:
        """Whether resolving the pair fails at once (not somewhere below it)."""
        wt, rt = writer.type, reader.type
        if wt == "union":
            return False
        if wt == rt:
            if wt == "fixed":
                return _short(self._fullname(writer)) != reader.name or writer.size != reader.size
            if wt == "enum":
                return _short(self._fullname(writer)) != reader.name
            if wt == "record":
                fields = self._writer_fields(writer)
                return any(rf.name not in fields and not rf.has_default for rf in reader.fields)
            return False
        if rt == "union":
            return self._first_match(writer, reader) is None
        return (wt, rt) not in _PROMOTIONS

    def _equivalent(self, writer: Schema, reader: Schema, seen: dict) -> bool:
        """Avro's union equivalence: the same shape, branch for branch (then no resolution is needed)."""
        wt = writer.type
        if wt != reader.type:
            return False
        if wt in _NAMED and _short(self._fullname(writer)) != reader.name:
            return False
        if wt in _PRIMITIVES:
            return True
        if wt == "array":
            return self._equivalent(writer.items, reader.items, seen)
        if wt == "map":
            return self._equivalent(writer.values, reader.values, seen)
        if wt == "fixed":
            return writer.size == reader.size
        if wt == "enum":
            return list(writer.symbols) == list(reader.symbols)
        if wt == "union":
            return len(writer.schemas) == len(reader.schemas) and all(
                self._equivalent(w, r, seen) for w, r in zip(writer.schemas, reader.schemas))
        key = (id(writer), id(reader))
        if key not in seen:
            seen[key] = True
            renamed = self.field_aliases.get(self._fullname(writer), {})
            seen[key] = len(writer.fields) == len(reader.fields) and all(
                renamed.get(w.name, w.name) == r.name and self._equivalent(w.type, r.type, seen)
                for w, r in zip(writer.fields, reader.fields))
        return seen[key]


__all__ = ["can_read"]
