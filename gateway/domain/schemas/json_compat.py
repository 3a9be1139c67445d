"""JSON Schema compatibility by Confluent's Schema Registry's rules, the registry whose serializers most
applications run: its `json/diff` package lists every difference between the schema data was written
with (the original) and the one that reads it (the update), and the update is compatible when each
difference is of a kind in `SchemaDiff.COMPATIBLE_CHANGES_STRICT` (the registry's default policy).

The schemas are first read as Confluent's registry reads them (the everit loader; 2019-09 and 2020-12's
`prefixItems`, `dependentRequired`, `dependentSchemas` and `unevaluated*` as its newer loader): `true`,
`{}` and `false`; a `$ref` followed to what it names in the same document; one typed schema per
`type` (several types: an anyOf of them); keywords of a type without `type` make a schema of that
type; and `enum`, `const`, `not`, `allOf`, `anyOf`, `oneOf` beside them make a synthetic allOf of
the pieces. Then, as Confluent compares them:
- a type changed is incompatible, unless the update takes anything or the original took nothing;
  integer widened to number, a union gaining a branch, and a branch of an allOf dropped are not;
- bounds (length, value, items, properties, contains) may widen, not narrow; a pattern may go, not
  come or change; `multipleOf` may shrink to a divisor; `uniqueItems` may go; an enum may grow;
- a property added to an open content model is incompatible unless its schema is empty, one
  removed is compatible; added to a closed one it is compatible unless required without a
  default; removed from a closed one it is not (unless its schema was `false`); a partially open
  model (additionalProperties or patternProperties with a schema) covers what its schema reads;
- dependencies may be dropped, not added; `not` may narrow what it excludes;
- the subschemas of a combined schema are matched one to one (a maximum matching over the
  compatible pairs) and a smaller side left unmatched is incompatible.
A `$ref` to another subject's schema (by its reference's name) is followed into that schema."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# SchemaDiff.COMPATIBLE_CHANGES_STRICT
COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
MULTIPLE_OF_REMOVED REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED
DEPENDENCY_ARRAY_NARROWED DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED
MAX_PROPERTIES_REMOVED MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED
ADDITIONAL_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED
MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED
ADDITIONAL_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_CLOSED_CONTENT_MODEL
ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
UNEVALUATED_PROPERTIES_ADDED UNEVALUATED_PROPERTIES_EXTENDED UNEVALUATED_ITEMS_ADDED UNEVALUATED_ITEMS_EXTENDED
ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

_OBJECT_WORDS = ("properties", "required", "minProperties", "maxProperties", "dependencies",
                 "dependentRequired", "dependentSchemas", "patternProperties", "additionalProperties",
                 "unevaluatedProperties", "propertyNames")
_ARRAY_WORDS = ("items", "prefixItems", "additionalItems", "unevaluatedItems", "maxItems", "minItems",
                "uniqueItems", "contains")
_STRING_WORDS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_WORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_IMPLICIT = (("object", _OBJECT_WORDS), ("array", _ARRAY_WORDS), ("string", _STRING_WORDS),
             ("number", _NUMBER_WORDS))
_CRITERIA = ("allOf", "anyOf", "oneOf")


@dataclass(eq=False)
class Node:
    """One schema as the everit loader makes it: `kind` is its class (true, empty, false, string,
    number, integer, boolean, null, object, array, enum, const, not, combined, ref)."""

    kind: str
    raw: Any
    criterion: str = ""
    subs: list[Node] = field(default_factory=list)

    @property
    def empty(self) -> bool:  # everit's TrueSchema extends EmptySchema
        return self.kind in ("true", "empty")

    def get(self, key: str) -> Any:
        return self.raw.get(key) if isinstance(self.raw, dict) else None


class _Loader:
    """Reads one document's schemas; a `$ref` to another registered schema (a reference's name,
    with or without a `#/...` pointer) is read by that document's loader."""

    def __init__(self, root: Any, documents: dict[str, Any], loaders: dict[str, _Loader] | None = None) -> None:
        self.root = root
        self.documents = documents
        self.loaders = loaders if loaders is not None else {}

    def load(self, raw: Any) -> Node:
        if raw is True:
            return Node("true", raw)
        if raw is False:
            return Node("false", raw)
        if not isinstance(raw, dict):
            return Node("empty", raw)
        if "$ref" in raw:
            found = self.resolve(raw["$ref"])
            return Node("ref", raw) if found is None else found[0].load(found[1])
        pieces: list[Node] = []
        t = raw.get("type")
        if isinstance(t, str):
            pieces.append(Node(t, raw))
        elif isinstance(t, list):
            typed = [Node(x, raw) for x in t if isinstance(x, str)]
            pieces.append(typed[0] if len(typed) == 1 else Node("combined", raw, "anyOf", typed))
        else:
            pieces += [Node(kind, raw) for kind, words in _IMPLICIT if any(w in raw for w in words)]
        if "enum" in raw:
            pieces.append(Node("enum", raw))
        if "const" in raw:
            pieces.append(Node("const", raw))
        if "not" in raw:
            pieces.append(Node("not", raw))
        for c in _CRITERIA:
            if isinstance(raw.get(c), list):
                pieces.append(Node("combined", raw, c, [self.load(s) for s in raw[c]]))
        if not pieces:
            return Node("empty", raw)
        return pieces[0] if len(pieces) == 1 else Node("combined", raw, "allOf", pieces)

    def resolve(self, ref: Any) -> tuple[_Loader, Any] | None:
        """What a `$ref` names, and the loader of the document it is in; None if it names nothing known."""
        if not isinstance(ref, str):
            return None
        name, _, pointer = ref.partition("#")
        loader: _Loader = self
        if name:
            if name not in self.documents:
                return None
            if name not in self.loaders:
                self.loaders[name] = _Loader(self.documents[name], self.documents, self.loaders)
            loader = self.loaders[name]
        at: Any = loader.root
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(at, dict) and part in at:
                at = at[part]
            elif isinstance(at, list) and part.isdigit() and int(part) < len(at):
                at = at[int(part)]
            else:
                return None
        return loader, at


class _Context:
    """Differences found at JSON paths (Confluent's diff Context), and the pairs being compared, so
    a recursive `$ref` compares each pair once (a cycle counts as compatible)."""

    def __init__(self, old: _Loader, new: _Loader, active: set[tuple[int, int, str, str]] | None = None) -> None:
        self.old, self.new = old, new
        self.path: list[str] = []
        self.diffs: list[tuple[str, str]] = []
        self.active: set[tuple[int, int, str, str]] = active if active is not None else set()

    def sub(self) -> _Context:
        ctx = _Context(self.old, self.new, self.active)
        ctx.path = list(self.path)
        return ctx

    @contextmanager
    def at(self, part: str) -> Iterator[None]:
        self.path.append(part)
        try:
            yield
        finally:
            self.path.pop()

    def add(self, kind: str, attribute: str | None = None) -> None:
        path = [*self.path, attribute] if attribute else self.path
        self.diffs.append((kind, "#/" + "/".join(path)))

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.diffs)


def _compare(ctx: _Context, o: Node | None, u: Node | None) -> None:
    """SchemaDiff.compare."""
    if o is None and u is None:
        return
    if o is None:
        ctx.add("SCHEMA_ADDED")
        return
    if u is None:
        ctx.add("SCHEMA_REMOVED")
        return
    pair = (id(o.raw), id(u.raw), o.kind, u.kind)
    if pair in ctx.active:
        return  # a recursive $ref came back to a pair under comparison: its answer is being found
    ctx.active.add(pair)
    try:
        _compare_types(ctx, o, u)
    finally:
        ctx.active.discard(pair)


def _subcompare(ctx: _Context, o: Node | None, u: Node | None) -> _Context:
    sub = ctx.sub()
    _compare(sub, o, u)
    return sub


def _compare_types(ctx: _Context, o: Node, u: Node) -> None:
    """SchemaDiff.compareTypes."""
    if (o.kind == "combined") != (u.kind == "combined") and _one_side_union(ctx, o, u):
        return
    if _class(o) != _class(u):
        if o.kind == "false" or u.empty:
            return
        if o.get("connect.type") == "bytes" == u.get("connect.type"):
            return  # Connect's JSON converter's decimals, as Confluent allows
        ctx.add("TYPE_CHANGED")
        return
    for word, kind in (("$id", "ID_CHANGED"), ("title", "TITLE_CHANGED"), ("description", "DESCRIPTION_CHANGED"),
                       ("default", "DEFAULT_CHANGED")):
        if o.get(word) != u.get(word):
            ctx.add(kind)
    compare = _BY_KIND.get(o.kind)
    if compare is not None:
        compare(ctx, o, u)


def _one_side_union(ctx: _Context, o: Node, u: Node) -> bool:
    """A plain schema against a combined one: a singleton stands for its one branch; the plain
    schema become one branch of an anyOf/oneOf is a sum extended, one branch kept of an allOf a
    product narrowed, when that branch is compatible. Whether that settled it."""
    combined, union = (u, u.criterion in ("anyOf", "oneOf")) if u.kind == "combined" else (o, o.criterion == "allOf")
    if len(combined.subs) == 1:
        branches, kind = combined.subs, ""
    elif union:
        branches, kind = combined.subs, "SUM_TYPE_EXTENDED" if combined is u else "PRODUCT_TYPE_NARROWED"
    else:
        return False
    for branch in branches:
        sub = _subcompare(ctx, o, branch) if combined is u else _subcompare(ctx, branch, u)
        if sub.compatible():
            ctx.diffs += sub.diffs
            if kind:
                ctx.add(kind)
            return True
    return False


def _class(n: Node) -> str:
    return "number" if n.kind == "integer" else n.kind


def _bound(ctx: _Context, word: str, name: str, o: Any, u: Any) -> None:
    """Added, removed, increased or decreased, as each Confluent diff says of a numeric keyword."""
    o = o if isinstance(o, int | float) and not isinstance(o, bool) else None
    u = u if isinstance(u, int | float) and not isinstance(u, bool) else None
    if o == u:
        return
    if o is None:
        ctx.add(f"{name}_ADDED", word)
    elif u is None:
        ctx.add(f"{name}_REMOVED", word)
    elif o < u:
        ctx.add(f"{name}_INCREASED", word)
    else:
        ctx.add(f"{name}_DECREASED", word)


def _string(ctx: _Context, o: Node, u: Node) -> None:
    _bound(ctx, "maxLength", "MAX_LENGTH", o.get("maxLength"), u.get("maxLength"))
    _bound(ctx, "minLength", "MIN_LENGTH", o.get("minLength"), u.get("minLength"))
    op, up = o.get("pattern"), u.get("pattern")
    if op is None and up is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif op is not None and up is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif op != up:
        ctx.add("PATTERN_CHANGED", "pattern")


def _number(ctx: _Context, o: Node, u: Node) -> None:
    for word, name in (("maximum", "MAXIMUM"), ("minimum", "MINIMUM"), ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
                       ("exclusiveMinimum", "EXCLUSIVE_MINIMUM")):
        _bound(ctx, word, name, o.get(word), u.get(word))
    om, um = _decimal(o.get("multipleOf")), _decimal(u.get("multipleOf"))
    if om != um:
        if om is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif um is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif om != 0 and um % om == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif um != 0 and om % um == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if (o.kind == "integer") != (u.kind == "integer"):
        ctx.add("TYPE_EXTENDED" if o.kind == "integer" else "TYPE_NARROWED")


def _decimal(v: Any) -> Any:
    from decimal import Decimal

    return Decimal(str(v)) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _canonical(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _enum(ctx: _Context, o: Node, u: Node) -> None:
    ov = {_canonical(v) for v in o.get("enum") or []}
    uv = {_canonical(v) for v in u.get("enum") or []}
    if ov != uv:
        ctx.add("ENUM_ARRAY_EXTENDED" if uv >= ov else "ENUM_ARRAY_NARROWED" if ov >= uv else "ENUM_ARRAY_CHANGED",
                "enum")


def _const(ctx: _Context, o: Node, u: Node) -> None:
    if _canonical(o.get("const")) != _canonical(u.get("const")):
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _not(ctx: _Context, o: Node, u: Node) -> None:
    with ctx.at("not"):
        # reversed: what the update excludes must be excluded by the original
        sub = _subcompare(ctx, ctx.new.load(u.get("not")), ctx.old.load(o.get("not")))
        ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")


def _combined(ctx: _Context, o: Node, u: Node) -> None:
    """CombinedSchemaDiff: criteria, sizes, then a maximum matching of compatible subschemas."""
    if o.criterion != u.criterion:
        single_o, single_u = len(o.subs) == 1, len(u.subs) == 1
        if (u.criterion == "anyOf" or (single_o and single_u) or (single_o and u.criterion == "oneOf")
                or (single_u and o.criterion == "allOf")):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    olds, news = _distinct(o.subs), _distinct(u.subs)
    if len(olds) < len(news):
        ctx.add("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(olds) > len(news):
        ctx.add("SUM_TYPE_NARROWED" if o.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for i, os_ in enumerate(olds):
        with ctx.at(f"{o.criterion}/{i}"):
            for j, us in enumerate(news):
                sub = _subcompare(ctx, os_, us)
                if sub.compatible():
                    edges[i, j] = sub.diffs
    matching = _max_matching(len(olds), len(news), edges)
    for pair in matching:
        ctx.diffs += edges[pair]
    if len(matching) < min(len(olds), len(news)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _distinct(nodes: list[Node]) -> list[Node]:
    seen: dict[str, Node] = {}
    for n in nodes:
        seen.setdefault(_canonical(n.raw) + n.kind, n)
    return list(seen.values())


def _max_matching(left: int, right: int, edges: dict[tuple[int, int], Any]) -> list[tuple[int, int]]:
    """A maximum-cardinality bipartite matching (augmenting paths)."""
    match_right: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in range(right):
            if (i, j) in edges and j not in seen:
                seen.add(j)
                if j not in match_right or augment(match_right[j], seen):
                    match_right[j] = i
                    return True
        return False

    for i in range(left):
        augment(i, set())
    return sorted((i, j) for j, i in match_right.items())


def _props(ctx: _Context, n: Node, old: bool) -> dict[str, Node]:
    loader = ctx.old if old else ctx.new
    props = n.get("properties")
    return {k: loader.load(v) for k, v in props.items()} if isinstance(props, dict) else {}


def _required(n: Node) -> set[str]:
    req = n.get("required")
    return {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()


def _extra(ctx: _Context, n: Node, old: bool, word: str) -> tuple[bool, Node | None]:
    """Whether additional properties (or items) are permitted, and their schema if one is given."""
    value = n.get(word)
    if value is False:
        return False, None
    if isinstance(value, dict):
        return True, (ctx.old if old else ctx.new).load(value)
    return True, None


def _uneval(ctx: _Context, n: Node, old: bool, word: str) -> Node | None:
    """`unevaluatedProperties`/`unevaluatedItems` (2019-09 and later), as a schema, if given."""
    value = n.get(word)
    return None if value is None else (ctx.old if old else ctx.new).load(value)


def _open(ctx: _Context, n: Node, old: bool, words: tuple[str, str] = ("additionalProperties",
                                                                       "unevaluatedProperties")) -> bool:
    """Fully open: additional members allowed with no schema of theirs (nor any pattern's), and
    unevaluated ones absent or `true`."""
    permits, schema = _extra(ctx, n, old, words[0])
    if not permits or schema is not None or (words[0] == "additionalProperties" and n.get("patternProperties")):
        return False
    uneval = _uneval(ctx, n, old, words[1])
    return uneval is None or uneval.empty


def _partial(ctx: _Context, n: Node, old: bool, key: str) -> Node | None:
    """The schema a partially open content model gives an undeclared property."""
    loader = ctx.old if old else ctx.new
    patterns = n.get("patternProperties")
    if isinstance(patterns, dict):
        for pattern, schema in patterns.items():
            try:
                if re.search(pattern, key):
                    return loader.load(schema)
            except re.error:
                continue
    return _partial_extra(ctx, n, old, ("additionalProperties", "unevaluatedProperties"))


def _partial_extra(ctx: _Context, n: Node, old: bool, words: tuple[str, str]) -> Node | None:
    """The schema undeclared members must match: additional's, else (additional absent) a
    non-trivial unevaluated's."""
    permits, schema = _extra(ctx, n, old, words[0])
    if schema is not None:
        return schema
    if permits and n.get(words[0]) is None:
        uneval = _uneval(ctx, n, old, words[1])
        if uneval is not None and uneval.kind != "false" and not uneval.empty:
            return uneval
    return None


def _compare_extra(ctx: _Context, o: Node, u: Node, words: tuple[str, str], name: str, path: str) -> None:
    """compareAdditionalProperties/Items: allowed or not, then with or without a schema of their own."""
    (opermits, oschema), (upermits, uschema) = _extra(ctx, o, True, words[0]), _extra(ctx, u, False, words[1])
    with ctx.at(path):
        if opermits != upermits:
            ctx.add(f"{name}_ADDED" if upermits else f"{name}_REMOVED")
        elif oschema is None and uschema is not None:
            ctx.add(f"{name}_NARROWED")
        elif uschema is None and oschema is not None:
            ctx.add(f"{name}_EXTENDED")
        else:
            _compare(ctx, oschema, uschema)


def _compare_uneval(ctx: _Context, o: Node, u: Node, word: str, name: str) -> None:
    """compareUnevaluatedProperties/Items."""
    ou, uu = _uneval(ctx, o, True, word), _uneval(ctx, u, False, word)
    if ou is None and uu is None:
        return
    with ctx.at(word):
        if ou is None:
            assert uu is not None
            ctx.add(f"{name}_REMOVED" if uu.kind == "false" else f"{name}_NARROWED")
        elif uu is None:
            ctx.add(f"{name}_ADDED" if ou.kind == "false" else f"{name}_EXTENDED")
        elif ou.kind == "false" and uu.kind != "false":
            ctx.add(f"{name}_ADDED")
        elif ou.kind != "false" and uu.kind == "false":
            ctx.add(f"{name}_REMOVED")
        elif ou.empty and not uu.empty:
            ctx.add(f"{name}_NARROWED")
        elif not ou.empty and uu.empty:
            ctx.add(f"{name}_EXTENDED")
        else:
            _compare(ctx, ou, uu)


def _has_default(n: Node) -> bool:
    return isinstance(n.raw, dict) and "default" in n.raw


def _object(ctx: _Context, o: Node, u: Node) -> None:
    """ObjectSchemaDiff."""
    op, up = _props(ctx, o, True), _props(ctx, u, False)
    oreq, ureq = _required(o), _required(u)
    with ctx.at("required"):
        for key in op:
            if key in up and (key in oreq) != (key in ureq):
                if key in oreq:
                    ctx.add("REQUIRED_ATTRIBUTE_REMOVED", key)
                else:
                    ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if _has_default(up[key])
                            else "REQUIRED_ATTRIBUTE_ADDED", key)
    with ctx.at("properties"):
        for key in sorted(op.keys() | up.keys()):
            with ctx.at(key):
                _property(ctx, o, u, key, op.get(key), up.get(key), key in ureq)
    with ctx.at("dependencies"):
        _dependencies(ctx, o, u)
    _compare_extra(ctx, o, u, ("additionalProperties", "additionalProperties"), "ADDITIONAL_PROPERTIES",
                   "additionalProperties")
    _compare_uneval(ctx, o, u, "unevaluatedProperties", "UNEVALUATED_PROPERTIES")
    _bound(ctx, "maxProperties", "MAX_PROPERTIES", o.get("maxProperties"), u.get("maxProperties"))
    _bound(ctx, "minProperties", "MIN_PROPERTIES", o.get("minProperties"), u.get("minProperties"))


def _property(ctx: _Context, o: Node, u: Node, key: str, os_: Node | None, us: Node | None,
              required: bool) -> None:
    if us is None:
        assert os_ is not None
        _removed(ctx, "PROPERTY", os_, _open(ctx, u, False), _partial(ctx, u, False, key))
    elif os_ is None:
        if _open(ctx, o, True):
            if us.empty:
                ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
            elif required:
                ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if _has_default(us)
                        else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            else:
                ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            return
        if (partial := _partial(ctx, o, True, key)) is not None:
            _covered(ctx, "PROPERTY_ADDED", partial, us)
        if required:
            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if _has_default(us)
                    else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        _compare(ctx, os_, us)


def _dependencies(ctx: _Context, o: Node, u: Node) -> None:
    od, ud = _merged_dependencies(o), _merged_dependencies(u)
    arrays = ({k: set(v) for k, v in od.items() if isinstance(v, list)},
              {k: set(v) for k, v in ud.items() if isinstance(v, list)})
    for key in sorted(arrays[0].keys() | arrays[1].keys()):
        oa, ua = arrays[0].get(key), arrays[1].get(key)
        if ua is None:
            ctx.add("DEPENDENCY_ARRAY_REMOVED", key)
        elif oa is None:
            ctx.add("DEPENDENCY_ARRAY_ADDED", key)
        elif oa != ua:
            ctx.add("DEPENDENCY_ARRAY_EXTENDED" if ua >= oa else "DEPENDENCY_ARRAY_NARROWED" if oa >= ua
                    else "DEPENDENCY_ARRAY_CHANGED", key)
    schemas = ({k: v for k, v in od.items() if not isinstance(v, list)},
               {k: v for k, v in ud.items() if not isinstance(v, list)})
    for key in sorted(schemas[0].keys() | schemas[1].keys()):
        with ctx.at(key):
            if key not in schemas[1]:
                ctx.add("DEPENDENCY_SCHEMA_REMOVED")
            elif key not in schemas[0]:
                ctx.add("DEPENDENCY_SCHEMA_ADDED")
            else:
                _compare(ctx, ctx.old.load(schemas[0][key]), ctx.new.load(schemas[1][key]))


def _merged_dependencies(n: Node) -> dict[str, Any]:
    """`dependencies`, with 2019-09's split `dependentRequired` and `dependentSchemas` beside it."""
    out: dict[str, Any] = {}
    for word in ("dependencies", "dependentRequired", "dependentSchemas"):
        value = n.get(word)
        if isinstance(value, dict):
            out.update(value)
    return out


def _items(n: Node) -> tuple[Any, list[Any] | None, str]:
    """The schema of every item, the positional item schemas, and the keyword holding additional
    items' schema: `items`/`additionalItems` up to draft-07, `prefixItems`/`items` after."""
    if isinstance(n.get("prefixItems"), list):
        return None, n.get("prefixItems"), "items"
    items = n.get("items")
    return (None, items, "additionalItems") if isinstance(items, list) else (items, None, "additionalItems")


def _array(ctx: _Context, o: Node, u: Node) -> None:
    """ArraySchemaDiff."""
    (oall, oi, oword), (uall, ui, uword) = _items(o), _items(u)
    with ctx.at("items"):
        _compare(ctx, None if oall is None else ctx.old.load(oall), None if uall is None else ctx.new.load(uall))
    olist = [ctx.old.load(s) for s in oi or []]
    ulist = [ctx.new.load(s) for s in ui or []]
    oextra = _partial_extra(ctx, o, True, (oword, "unevaluatedItems"))
    uextra = _partial_extra(ctx, u, False, (uword, "unevaluatedItems"))
    oopen = _open(ctx, o, True, (oword, "unevaluatedItems"))
    uopen = _open(ctx, u, False, (uword, "unevaluatedItems"))
    for i in range(max(len(olist), len(ulist))):
        with ctx.at(f"items/{i}"):
            if i < len(olist) and i < len(ulist):
                _compare(ctx, olist[i], ulist[i])
            elif i < len(olist):
                _removed(ctx, "ITEM", olist[i], uopen, uextra)
            else:
                _item_added(ctx, ulist[i], oopen, oextra)
    _compare_extra(ctx, o, u, (oword, uword), "ADDITIONAL_ITEMS", "additionalItems")
    _compare_uneval(ctx, o, u, "unevaluatedItems", "UNEVALUATED_ITEMS")
    _bound(ctx, "maxItems", "MAX_ITEMS", o.get("maxItems"), u.get("maxItems"))
    _bound(ctx, "minItems", "MIN_ITEMS", o.get("minItems"), u.get("minItems"))
    if (o.get("uniqueItems") is True) != (u.get("uniqueItems") is True):
        ctx.add("UNIQUE_ITEMS_REMOVED" if o.get("uniqueItems") is True else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    _bound(ctx, "maxContains", "MAX_CONTAINS", o.get("maxContains"), u.get("maxContains"))
    _bound(ctx, "minContains", "MIN_CONTAINS", o.get("minContains"), u.get("minContains"))


def _removed(ctx: _Context, what: str, member: Node, open_: bool, partial: Node | None) -> None:
    """A property or item (`what`) the update no longer declares: fine where the update's content
    model is open, or covers it; else only if it was `false` (never there)."""
    if open_:
        ctx.add(f"{what}_REMOVED_FROM_OPEN_CONTENT_MODEL")
    elif partial is not None:
        _covered(ctx, f"{what}_REMOVED", member, partial)
    else:
        ctx.add(f"{what}_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if member.kind == "false"
                else f"{what}_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _covered(ctx: _Context, change: str, o: Node, u: Node) -> None:
    """Whether a partially open content model's schema covers a member added or removed."""
    sub = _subcompare(ctx, o, u)
    ctx.diffs += sub.diffs
    ctx.add(f"{change}_{'IS' if sub.compatible() else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")


def _item_added(ctx: _Context, item: Node, open_: bool, extra: Node | None) -> None:
    if open_:
        ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if item.empty
                else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
    elif extra is not None:
        _covered(ctx, "ITEM_ADDED", extra, item)
    else:
        ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


def _ref(ctx: _Context, o: Node, u: Node) -> None:
    if o.get("$ref") != u.get("$ref"):
        ctx.add("TYPE_CHANGED")


_BY_KIND = {"string": _string, "number": _number, "integer": _number, "enum": _enum, "const": _const,
            "not": _not, "combined": _combined, "object": _object, "array": _array, "ref": _ref}


# Confluent's Difference.error(): what each incompatible kind says, `{r}`/`{w}` the two schemas
_SAYS = [
    ({"MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED",
      "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED",
      "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED",
      "MIN_ITEMS_ADDED", "MAX_CONTAINS_ADDED", "MIN_CONTAINS_ADDED", "UNIQUE_ITEMS_ADDED",
      "ADDITIONAL_ITEMS_REMOVED", "ADDITIONAL_PROPERTIES_REMOVED", "UNEVALUATED_PROPERTIES_REMOVED",
      "UNEVALUATED_ITEMS_REMOVED"},
     "The keyword at path '{p}' in the {r} schema is not present in the {w} schema"),
    ({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED", "MIN_PROPERTIES_INCREASED",
      "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED", "MIN_CONTAINS_INCREASED"},
     "The value at path '{p}' in the {r} schema is more than its value in the {w} schema"),
    ({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED", "MAX_CONTAINS_DECREASED",
      "EXCLUSIVE_MAXIMUM_DECREASED", "MAX_PROPERTIES_DECREASED"},
     "The value at path '{p}' in the {r} schema is less than its value in the {w} schema"),
    ({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"},
     "The value at path '{p}' is different between the {r} and {w} schema"),
    ({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED", "ADDITIONAL_PROPERTIES_NARROWED",
      "UNEVALUATED_PROPERTIES_NARROWED", "UNEVALUATED_ITEMS_NARROWED"},
     "An array or combined type at path '{p}' has fewer elements in the {r} schema than the {w} schema"),
    ({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"},
     "An array or combined type at path '{p}' has more elements in the {r} schema than the {w} schema"),
    ({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED", "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
      "ENUM_ARRAY_CHANGED"},
     "A type at path '{p}' is different between the {r} schema and the {w} schema"),
    ({"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
      "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"},
     "The {r} schema has an open content model and has a property or item at path '{p}' which is missing "
     "in the {w} schema"),
    ({"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"},
     "The {r} schema has an unopen content model and has a required property at path '{p}' which is "
     "missing in the {w} schema"),
    ({"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
     "The {r} has a closed content model and is missing a property or item present at path '{p}' in the "
     "{w} schema"),
    ({"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "A property or item is missing in the {r} schema but present at path '{p}' in the {w} schema and is "
     "not covered by its partially open content model"),
    ({"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "The {r} schema has a property or item at path '{p}' which is missing in the {w} schema and is not "
     "covered by its partially open content model"),
]


def incompatibilities(reader: Any, writer: Any, roles: tuple[str, str] = ("reader", "writer"),
                      reader_documents: dict[str, Any] | None = None,
                      writer_documents: dict[str, Any] | None = None) -> list[str]:
    """Why a reader of JSON Schema `reader` cannot read what `writer` allowed (Confluent's
    SchemaDiff.compare(writer, reader), its incompatible kinds), naming the two schemas by `roles`;
    `*_documents` are the schemas each side's references name, by name."""
    old, new = _Loader(writer, writer_documents or {}), _Loader(reader, reader_documents or {})
    ctx = _Context(old, new)
    _compare(ctx, old.load(writer), new.load(reader))
    out = []
    for kind, path in ctx.diffs:
        if kind not in COMPATIBLE:
            says = next((text for kinds, text in _SAYS if kind in kinds), "")
            out.append(f'{{errorType:"{kind}", description:"{says.format(p=path, r=roles[0], w=roles[1])}"}}')
    return out
