"""`hf:` names, each to the module that builds its kind: an image classifier
(`hf:vit`, `hf:convnext`, ...: hf_vision.py) or a text model (everything else: hf.py, which
also says what is wrong with a type neither takes)."""

from __future__ import annotations

from mpbench.workloads.user import Resolved
from mpbench.workloads.zoo import ZooName, hf, hf_vision, import_package


def resolve(name: ZooName) -> Resolved:
    import_package(name, "transformers")  # one line saying how to install it, where it is not
    from transformers import CONFIG_MAPPING

    model_type = name.model if name.model in CONFIG_MAPPING else name.model.lower()
    if model_type in CONFIG_MAPPING and hf_vision.wanted(name, model_type):
        return hf_vision.resolve(name, model_type)
    return hf.resolve(name)  # a text model's type, or an unknown one (hf.py names it)
