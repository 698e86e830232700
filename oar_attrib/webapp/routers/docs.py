"""The API reference at /docs, rendered on the server from the app's OpenAPI schema.

FastAPI's default /docs page loads Swagger UI from a CDN, which breaks offline and under this
app's Content-Security-Policy; this page needs neither. The raw schema is /openapi.json.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..deps import TemplatesDep

router = APIRouter(include_in_schema=False)
_CONSTRAINTS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                "maxLength", "minItems", "maxItems", "pattern")


def describe_schema(schema: dict, components: dict) -> str:
    """A one-line description of a JSON schema: type, allowed values, constraints, default."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(describe_schema(s, components) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        kind = f"array of {describe_schema(schema['items'], components)}"
    parts = [kind]
    if "enum" in schema:
        parts.append("one of " + ", ".join(map(str, schema["enum"])))
    parts += [f"{c} {schema[c]}" for c in _CONSTRAINTS if c in schema]
    if "default" in schema:
        parts.append(f"default {schema['default']!r}")
    return "; ".join(parts)


def _models(spec: dict) -> list[dict]:
    components = spec.get("components", {}).get("schemas", {})
    keep = [n for n in components if not n.endswith("ValidationError")]
    return [{"name": name, "description": components[name].get("description", ""),
             "fields": [{"name": f, "required": f in components[name].get("required", []),
                         "schema": describe_schema(s, components)}
                        for f, s in components[name].get("properties", {}).items()]}
            for name in keep]


def endpoints(spec: dict) -> list[dict]:
    """Each operation of the spec: method, path, summary, parameters, body and responses."""
    components = spec.get("components", {}).get("schemas", {})
    out = []
    for path, ops in spec.get("paths", {}).items():
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            out.append({
                "method": method.upper(), "path": path, "summary": op.get("summary", ""),
                "description": op.get("description", ""), "api": path.startswith("/api/"),
                "parameters": [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                                "schema": describe_schema(p.get("schema", {}), components),
                                "description": p.get("description", "")}
                               for p in op.get("parameters", [])],
                "body": describe_schema(body["schema"], components) if body else None,
                "responses": [f"{code}: {r.get('description', '')}"
                              for code, r in op.get("responses", {}).items()],
            })
    return sorted(out, key=lambda e: (not e["api"], e["path"], e["method"]))


@router.get("/docs", response_class=HTMLResponse)
def docs_page(request: Request, templates: TemplatesDep):
    spec = request.app.openapi()
    return templates.TemplateResponse(request, "docs.html", {
        "info": spec["info"], "endpoints": endpoints(spec), "models": _models(spec)})
