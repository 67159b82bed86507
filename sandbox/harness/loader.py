"""Loading task and candidate sources as modules, and routing each workspace
layout to its prebuilt artifacts (built in the compile stage, never here)."""
import importlib.util
import json
import os
import sys

import kernelrl


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def prepare_artifacts(layout, artifact_dir):
    """Makes the compiled kernels reachable the way each layout expects."""
    manifest_path = os.path.join(artifact_dir, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    if layout in ("FAST_PATH", "CPU"):
        so = manifest.get("kernels_so")
        kernelrl._set_library_path(os.path.join(artifact_dir, so) if so else "")
    elif layout == "TORCH_EXTENSION":
        sys.path.insert(0, os.path.join(artifact_dir, manifest.get("extension_dir", "")))
    elif layout == "SINGLE_FILE_INLINE":
        _route_load_inline(artifact_dir, manifest.get("extensions", {}))


def _route_load_inline(artifact_dir, extensions):
    """load_inline()/load() inside model_new.py return the module the compile
    stage built; building here would need a compiler (exec is forbidden)."""
    import importlib.machinery
    import torch.utils.cpp_extension as cpp

    def prebuilt(name, *args, **kwargs):
        rel = extensions.get(name)
        if rel is None:
            raise ImportError(f"extension {name!r} was not built in the compile stage")
        path = os.path.join(artifact_dir, rel)
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod

    cpp.load_inline = prebuilt
    cpp.load = prebuilt
