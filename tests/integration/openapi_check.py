"""Checks real responses against docs/openapi.yaml.

validate_response(method, path_template, status, headers, body_bytes) finds what the document says
about the answer and raises AssertionError naming the first difference:

- the operation (`paths[path_template][method]`); a method the path does not have takes the path's
  `x-sluice-other-methods`, a path_template of None (a path no plane serves) the document's
  `x-sluice-unknown-path`; the document's `x-sluice-any-request` applies to every request;
- the status among those responses (an exact code, then `4XX`-style ranges, then `default`);
- the Content-Type among the response's media types (exact, else by type/subtype), or an empty
  body when the response documents none;
- every documented header that is required is present, and each documented header that is present
  matches its schema (an `Allow` also lists exactly the path's documented methods);
- the JSON body validates against its schema (Draft 2020-12, `#/components/...` references resolved
  in the whole document, `date-time` checked); a problem+json `status` equals the HTTP status.

Works with jsonschema 4.10 (Debian 12, RefResolver) and later versions (the `referencing`
registry)."""
import datetime
import inspect
import json
import os
import re

import jsonschema
import yaml

DOC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                        "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# An http URI: urllib.parse.urljoin, which jsonschema 4.10 resolves with, ignores a urn: base.
_DOC_URI = "https://sluice.invalid/docs/openapi.yaml"

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _format_checker():
    checker = jsonschema.FormatChecker()

    # jsonschema checks date-time only with an optional package installed; this does not depend
    # on it.
    @checker.checks("date-time", raises=ValueError)
    def date_time(value):
        if not isinstance(value, str):
            return True
        if not _RFC3339.match(value):
            raise ValueError(f"{value!r} is not an RFC 3339 date-time")
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return True

    return checker


FORMAT_CHECKER = _format_checker()


def _rebase(schema):
    """A copy of `schema` whose local references ("#/...") name the document's URI."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                out[k] = _DOC_URI + v
            else:
                out[k] = _rebase(v)
        return out
    if isinstance(schema, list):
        return [_rebase(v) for v in schema]
    return schema


def load(path=DOC_PATH):
    with open(path) as f:
        return yaml.safe_load(f)


class Spec:
    """docs/openapi.yaml, loaded once, with validators for its schemas."""

    def __init__(self, document):
        self.doc = document
        self._registry = None
        if "registry" not in inspect.signature(jsonschema.Draft202012Validator).parameters:
            return  # jsonschema < 4.18: RefResolver only
        import referencing
        import referencing.jsonschema
        resource = referencing.Resource.from_contents(
            document, default_specification=referencing.jsonschema.DRAFT202012)
        self._registry = referencing.Registry().with_resource(_DOC_URI, resource)

    def validator(self, schema):
        """A Draft 2020-12 validator for `schema`, a schema taken from the document: its
        `#/components/...` references resolve in the whole document (they are rewritten to the
        document's URI, under which the document itself is registered)."""
        schema = _rebase(schema)
        if self._registry is not None:
            return jsonschema.Draft202012Validator(schema, registry=self._registry,
                                                   format_checker=FORMAT_CHECKER)
        resolver = jsonschema.RefResolver("", schema, store={_DOC_URI: self.doc})
        return jsonschema.Draft202012Validator(schema, resolver=resolver,
                                               format_checker=FORMAT_CHECKER)

    def resolve(self, node):
        """Follows `$ref` of an OpenAPI object (a response, header, parameter) to its target."""
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            node = self.pointer(node["$ref"])
            seen += 1
            if seen > 20:
                raise AssertionError("openapi: $ref loop")
        return node

    def pointer(self, ref):
        if not ref.startswith("#/"):
            raise AssertionError(f"openapi: only local references are used, got {ref!r}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise AssertionError(f"openapi: {ref!r} does not resolve")
            node = node[part]
        return node

    # --- finding what the document says ---------------------------------------------------

    def responses_for(self, method, path_template):
        """(where, responses, path_item): the responses that apply, in the order to look in."""
        method = method.lower()
        any_request = self.doc.get("x-sluice-any-request", {}).get("responses", {})
        if path_template is None:
            unknown = self.doc.get("x-sluice-unknown-path", {}).get("responses", {})
            return "an unknown path", [unknown, any_request], None
        paths = self.doc.get("paths", {})
        if path_template not in paths:
            raise AssertionError(f"openapi: no path {path_template!r} in the document")
        item = paths[path_template]
        if method in item:
            return (f"{method.upper()} {path_template}", [item[method].get("responses", {}),
                                                           any_request], item)
        other = item.get("x-sluice-other-methods", {}).get("responses", {})
        return f"{method.upper()} {path_template} (not a method of it)", [other, any_request], item


def _find_status(responses_list, status):
    code = str(status)
    for responses in responses_list:
        if code in responses:
            return responses[code]
    for responses in responses_list:
        if code[0] + "XX" in responses:
            return responses[code[0] + "XX"]
    for responses in responses_list:
        if "default" in responses:
            return responses["default"]
    return None


def _media_type(value):
    """'Text/Plain ; charset=utf-8' -> ('text/plain', 'text/plain; charset=utf-8')"""
    parts = [p.strip().lower() for p in value.split(";")]
    return parts[0], "; ".join(p for p in parts if p)


def _schema_errors(spec, schema, instance):
    errors = sorted(spec.validator(schema).iter_errors(instance), key=lambda e: list(e.path))
    out = []
    for e in errors[:5]:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        out.append(f"  at {where}: {e.message}")
    return out


_SPEC = None


def spec():
    global _SPEC
    if _SPEC is None:
        _SPEC = Spec(load())
    return _SPEC


def validate_response(method, path_template, status, headers, body_bytes, document=None):
    """Raises AssertionError unless docs/openapi.yaml documents this answer exactly.

    `headers` maps names (any case) to values; `path_template` is a key of `paths`
    ("/v1/usage/{subject}") or None for a path no plane serves; `document` replaces the loaded
    docs/openapi.yaml (for self-tests)."""
    s = spec() if document is None else Spec(document)
    headers = {k.lower(): v for k, v in dict(headers).items()}
    body_bytes = body_bytes or b""
    where, responses_list, item = s.responses_for(method, path_template)
    context = f"{where} -> {status}"
    response = _find_status(responses_list, status)
    if response is None:
        documented = sorted({c for r in responses_list for c in r})
        raise AssertionError(f"{context}: status not documented (documented: {documented}); "
                             f"body {body_bytes[:300]!r}")
    response = s.resolve(response)

    for name, header in (response.get("headers") or {}).items():
        header = s.resolve(header)
        value = headers.get(name.lower())
        if value is None:
            if header.get("required"):
                raise AssertionError(f"{context}: documented header {name} missing; "
                                     f"got {sorted(headers)}")
            continue
        if "schema" in header:
            errors = _schema_errors(s, header["schema"], value)
            if errors:
                raise AssertionError(f"{context}: header {name}: {value!r} does not match:\n" +
                                     "\n".join(errors))
        if name.lower() == "allow" and item is not None:
            listed = {m.strip().lower() for m in value.split(",")}
            documented = {m for m in METHODS if m in item}
            if listed != documented:
                raise AssertionError(f"{context}: Allow {value!r} but the document gives the "
                                     f"path {sorted(m.upper() for m in documented)}")

    content = response.get("content")
    if not content:
        if body_bytes:
            raise AssertionError(f"{context}: no body documented, got {body_bytes[:300]!r}")
        return None
    content_type = headers.get("content-type")
    if content_type is None:
        raise AssertionError(f"{context}: no Content-Type; documented {sorted(content)}")
    bare, full = _media_type(content_type)
    media = None
    for key, value in content.items():
        if _media_type(key)[1] == full:
            media = value
    if media is None:
        for key, value in content.items():
            if ";" not in key and _media_type(key)[0] == bare:
                media = value
    if media is None:
        raise AssertionError(f"{context}: Content-Type {content_type!r} not documented "
                             f"({sorted(content)})")
    schema = (media or {}).get("schema")
    if schema is None:
        return None
    if bare == "application/json" or bare.endswith("+json"):
        try:
            body = json.loads(body_bytes)
        except ValueError as e:
            raise AssertionError(f"{context}: body is not JSON ({e}): {body_bytes[:300]!r}")
    else:
        body = body_bytes.decode("utf-8")
    errors = _schema_errors(s, schema, body)
    if errors:
        raise AssertionError(f"{context}: body does not match the document:\n" +
                             "\n".join(errors) + f"\nbody: {body_bytes[:500]!r}")
    if bare == "application/problem+json" and isinstance(body, dict) and "status" in body:
        if body["status"] != status:
            raise AssertionError(f"{context}: problem status {body['status']} differs from the "
                                 f"HTTP status")
    return body
