"""The oar-attrib web app: runs, traces with importance heatmaps, recall reports, live
attribution. Build it with `create_app(store_path, model=None)`; serve it with `oar web`.

Names load on first use, so that `oar_attrib.webapp.cli` (imported by every `oar` command to register
`oar demo` and `oar web`) does not import the web framework.
"""
__all__ = ["create_app", "WebSettings"]


def __getattr__(name: str):
    if name == "create_app":
        from .main import create_app

        return create_app
    if name == "WebSettings":
        from .settings import WebSettings

        return WebSettings
    raise AttributeError(f"module 'webapp' has no attribute {name!r}")
