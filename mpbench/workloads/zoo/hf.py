"""Hugging Face models by name: `hf:<model_type>[?key=value&...]`, a transformers model built
from its configuration with random weights (`AutoConfig.for_model`, `from_config`: nothing is
fetched), trained in torch on synthetic token ids of its task.

mpbench's own query keys are `seq_len`, `task`, `samples`, `labels`, `lr` and
`attn_implementation`; every other key is the configuration's, checked against the
configuration class so that a misspelt key is an error, not an ignored attribute.
"""

from __future__ import annotations

import copy
import inspect
import json
from typing import Any

import numpy as np

from mpbench.workloads.user import UserWorkload
from mpbench.workloads.zoo import (
    CLI_KEYS,
    Options,
    Resolved,
    ZooName,
    close_matches,
    import_package,
    parameter_count,
    version,
)
from mpbench.workloads.zoo.data import markov_tokens, score_labels, score_thresholds

SEQ_LEN = 128  # tokens a sample
SAMPLES = 512  # training sequences; the test set is a fifth as many again
LABELS = 2  # classes of a sequence classifier
BATCH_SIZE = 8
EPOCHS = 1
LEARNING_RATE = 3e-4  # AdamW's
USED_VOCAB = 256  # the data uses the first ids of the vocabulary only, so small models learn

CAUSAL_LM, CLASSIFICATION = "causal-lm", "sequence-classification"
TASKS = (CAUSAL_LM, CLASSIFICATION)
AUTO_CLASSES = {
    CAUSAL_LM: "AutoModelForCausalLM",
    CLASSIFICATION: "AutoModelForSequenceClassification",
}
_MAPPINGS = {
    CAUSAL_LM: "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    CLASSIFICATION: "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
}
# The default task. BERT-like encoders also have a causal-LM head in transformers
# (BertLMHeadModel, for use as a decoder: task=causal-lm builds it with is_decoder=True, see
# DECODER_FLAG), but an encoder is what they are and are trained as:
# a type named here, or one that has no causal-LM model at all, defaults to sequence
# classification; every other type (gpt2, llama, mistral, qwen2, ...) to causal LM.
ENCODERS = frozenset(
    {
        "albert", "bert", "camembert", "convbert", "data2vec-text", "deberta", "deberta-v2",
        "distilbert", "electra", "ernie", "esm", "flaubert", "funnel", "ibert", "megatron-bert",
        "mobilebert", "modernbert", "mpnet", "nezha", "roberta", "roberta-prelayernorm",
        "squeezebert", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod",
    }
)  # fmt: skip
# Types whose causal-LM model attends causally only with `is_decoder=True` (BertLMHeadModel
# and its kin: "If you want to use ... as a standalone, add `is_decoder=True`"): built with
# is_decoder=False, every position sees the token it must predict, and next-token accuracy is
# a lie (issue 55). task=causal-lm builds them with is_decoder=True, which the record's config
# keeps; an explicit is_decoder=false with it is refused.
DECODER_FLAG = frozenset(
    {
        "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
        "megatron-bert", "reformer", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
        "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod",
    }
)  # fmt: skip
EXAMPLES = ("gpt2", "llama", "mistral", "qwen2", "bert", "roberta", "distilbert")
REFUSED = {
    **CLI_KEYS,
    "dtype": "the model is built in float32; -p sets the precision",
    "torch_dtype": "the model is built in float32; -p sets the precision",
    "num_labels": "use labels=N",
}
# Token ids a configuration reserves: the data never uses them (BERT's pad id, for one, has an
# embedding that never trains).
_SPECIAL_IDS = (
    "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "unk_token_id",
)  # fmt: skip


def resolve(name: ZooName) -> Resolved:
    transformers = import_package(name, "transformers")
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    model_type = name.model if name.model in CONFIG_MAPPING else name.model.lower()
    if model_type not in CONFIG_MAPPING:
        known = list(CONFIG_MAPPING.keys())
        examples = ", ".join(t for t in EXAMPLES if t in CONFIG_MAPPING)
        raise name.invalid(
            f"unknown Hugging Face model_type {name.model!r}{close_matches(name.model, known)}"
            f"; e.g. {examples} ({len(known)} types in transformers {transformers.__version__})"
        )
    model_classes = {
        task: _class_name(getattr(modeling_auto, _MAPPINGS[task]).get(model_type)) for task in TASKS
    }
    has = [task for task in TASKS if model_classes[task]]
    if not has:
        raise name.invalid(
            f"{model_type} has neither a causal-LM nor a sequence-classification model in "
            "transformers: hf: builds text models (e.g. " + ", ".join(EXAMPLES) + ")"
        )
    options = Options(name)
    options.refuse(REFUSED)
    default_task = CLASSIFICATION if model_type in ENCODERS or CAUSAL_LM not in has else CAUSAL_LM
    task = options.choice("task", default_task, TASKS)
    if task not in has:
        raise name.invalid(f"{model_type} has no {task} model in transformers; it has {has[0]}")
    seq_len = options.integer("seq_len", SEQ_LEN)
    samples = options.integer("samples", SAMPLES, minimum=5)  # a fifth of it is the test set
    if task == CAUSAL_LM and "labels" in options.left:
        raise name.invalid("labels is for task=sequence-classification")
    labels = options.integer("labels", LABELS, minimum=2) if task == CLASSIFICATION else None
    lr = options.number("lr", LEARNING_RATE)
    causal_flag = task == CAUSAL_LM and model_type in DECODER_FLAG
    if causal_flag and options.left.get("is_decoder", True) is not True:
        raise name.invalid(
            f"task=causal-lm needs is_decoder=true for {model_type}, not "
            f"is_decoder={_query_text(options.left['is_decoder'])}: without it its attention is "
            "not causal and every position sees the token it must predict (leave is_decoder out: "
            "causal-lm sets it)"
        )
    attn = options.left.pop("attn_implementation", None)
    if attn is not None and not isinstance(attn, str):
        raise name.invalid(f"attn_implementation must be a name (sdpa, eager, ...), not {attn!r}")
    config = _config(name, model_type, options.left)
    if causal_flag:
        config.is_decoder = True  # causal attention; the record's config says so

    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text_config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 2:
        raise name.invalid(f"the {model_type} config has no usable vocab_size ({vocab!r})")
    positions = getattr(text_config, "max_position_embeddings", None)
    if isinstance(positions, int) and seq_len > positions:
        raise name.invalid(
            f"seq_len {seq_len} is more than the config's max_position_embeddings {positions}"
        )
    if task == CLASSIFICATION and getattr(config, "is_encoder_decoder", False):
        # Their classifiers read the encoder-decoder's <eos> token and need decoder inputs.
        instead = f"; {model_type} runs as task=causal-lm (its decoder)" if CAUSAL_LM in has else ""
        raise name.invalid(
            f"{model_type} is an encoder-decoder, whose classifier needs decoder inputs and "
            f"<eos> tokens: hf: classifies with encoder-only or decoder models (bert, gpt2, "
            f"...){instead}"
        )
    if task == CLASSIFICATION:
        config.num_labels = labels
        if getattr(config, "pad_token_id", None) is None:
            # A decoder classifies at the last token that is not padding, and refuses a batch
            # without a pad id: the last id, which the data never uses.
            config.pad_token_id = vocab - 1
    ids = _used_ids(text_config, config, vocab)
    if len(ids) < 2:
        raise name.invalid(f"vocab_size {vocab} leaves fewer than 2 ordinary token ids")
    model_class = model_classes[task]
    build_kwargs = {"attn_implementation": attn} if attn else {}
    thresholds = score_thresholds(seq_len, ids, labels) if labels else None

    def data(seed: int) -> tuple[np.ndarray, ...]:
        """(x_train, y_train, x_test, y_test): token ids; the next tokens (causal LM) or
        the sequence's class (classification)."""
        test = max(1, samples // 5)
        if task == CAUSAL_LM:
            tokens = markov_tokens(samples + test, seq_len + 1, ids, seed)
            x, y = np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])
        else:
            x = markov_tokens(samples + test, seq_len, ids, seed)
            y = score_labels(x, ids, thresholds)
        return x[:samples], y[:samples], x[samples:], y[samples:]

    def torch_build(device: Any) -> tuple[Any, Any, Any]:
        import torch

        auto = getattr(transformers, AUTO_CLASSES[task])
        model = auto.from_config(copy.deepcopy(config), **build_kwargs)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        return model.to(device), optimizer, LOSSES[task]

    about = (
        f"{model_class} ({task}) from transformers' {model_type} config, random weights; "
        f"synthetic tokens (an order-1 Markov chain over {len(ids)} ids), seq_len {seq_len}"
    )

    def check() -> str:
        try:
            import torch
        except ImportError:  # its torch cells are skipped, with the reason; nothing to build
            return about
        auto = getattr(transformers, AUTO_CLASSES[task])
        try:
            with torch.device("meta"):  # no memory, no initialisation: shapes only
                model = auto.from_config(copy.deepcopy(config), **build_kwargs)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise name.invalid(
                f"transformers cannot build {model_class} from it: {first}"
            ) from None
        return f"{model_class}, {parameter_count(model):,} parameters; " + about.split("; ", 1)[1]

    workload = UserWorkload(
        name=f"hf:{model_type}",
        data=data,
        torch=torch_build,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        description=about,
        output="logits",
    )
    source = {
        "zoo": "hf",
        "name": name.text,
        "model_type": model_type,
        "task": task,
        "model_class": model_class,
        "seq_len": seq_len,
        "samples": samples,
        "labels": labels,
        "lr": lr,
        "optimizer": "AdamW",
        "attn_implementation": attn,
        "data": f"order-1 Markov chain over token ids {int(ids[0])}..{int(ids[-1])} "
        f"({len(ids)} ids)",
        "config": _config_dict(config),
        "package": "transformers",
        "version": version(transformers),
    }
    return Resolved(workload, source, check)


def causal_lm_loss(logits: Any, y: Any) -> Any:
    """Next-token cross entropy over every position (the float32 logits, as mpbench gives
    them)."""
    from torch.nn.functional import cross_entropy

    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def classification_loss(logits: Any, y: Any) -> Any:
    from torch.nn.functional import cross_entropy

    return cross_entropy(logits, y)


LOSSES = {CAUSAL_LM: causal_lm_loss, CLASSIFICATION: classification_loss}


def _config(name: ZooName, model_type: str, keys: dict[str, Any]) -> Any:
    """The configuration, built locally; a key the configuration class does not know is
    refused (PretrainedConfig would keep it as a stray attribute, silently)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    try:
        config = AutoConfig.for_model(model_type, **keys)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise name.invalid(
            f"the {model_type} config refused it ({type(exc).__name__}: {first})"
        ) from None
    config_class = CONFIG_MAPPING[model_type]
    default = config_class()
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    known |= set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    stored = config.to_dict()
    # A key the class consumes under another name (llama's rope_theta) is not stored as given.
    unknown = [key for key in keys if key not in known and key in stored]
    if unknown:
        key = unknown[0]
        raise name.invalid(
            f"the {model_type} config ({config_class.__name__}) has no {key!r}"
            f"{close_matches(key, sorted(known))}; mpbench's own keys: seq_len, task, samples, "
            "labels, lr, attn_implementation"
        )
    return config


def _used_ids(text_config: Any, config: Any, vocab: int) -> np.ndarray:
    """The token ids the data draws from: the first USED_VOCAB of the vocabulary that no
    special token reserves."""
    special: set[int] = set()
    for holder in (text_config, config):
        for attr in _SPECIAL_IDS:
            value = getattr(holder, attr, None)
            values = value if isinstance(value, list | tuple) else [value]
            special |= {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
    ids = [i for i in range(min(vocab, USED_VOCAB + len(special))) if i not in special]
    return np.array(ids[:USED_VOCAB], dtype=np.int64)


def _query_text(value: Any) -> str:
    """A query value as it would be written (`false`, `none`, `0`)."""
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _class_name(found: Any) -> str | None:
    if isinstance(found, list | tuple):
        found = found[0] if found else None
    return found if isinstance(found, str) else None


def _config_dict(config: Any) -> dict[str, Any]:
    """The full configuration as JSON would keep it (every value, defaults included, so that
    a later transformers with other defaults can still build the same model)."""
    found = json.loads(config.to_json_string(use_diff=False))
    found.pop("_name_or_path", None)
    return found
