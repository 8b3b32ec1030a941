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
import re
from typing import Any

import numpy as np

from mpbench.workloads.user import Built, Resolved, UserWorkload
from mpbench.workloads.zoo import (
    CLI_KEYS,
    Options,
    ZooName,
    close_matches,
    held_out,
    hf_experts,
    import_package,
    one_line,
    parameter_count,
    resolved,
    seq2seq,
    test_samples,
)
from mpbench.workloads.zoo.data import markov_tokens, score_labels, score_thresholds
from mpbench.workloads.zoo.hf_positions import check_seq_len
from mpbench.workloads.zoo.seq2seq import SEQ2SEQ

SEQ_LEN = 128  # tokens a sample
SAMPLES = 512  # training sequences; the test set is a fifth as many again
LABELS = 2  # classes of a sequence classifier
BATCH_SIZE = 8
EPOCHS = 1
LEARNING_RATE = 3e-4  # AdamW's
USED_VOCAB = 256  # the data uses the first ids of the vocabulary only, so small models learn

CAUSAL_LM, CLASSIFICATION = "causal-lm", "sequence-classification"
TASKS = (CAUSAL_LM, CLASSIFICATION, SEQ2SEQ)  # seq2seq: an encoder-decoder's (seq2seq.py)
AUTO_CLASSES = {
    CAUSAL_LM: "AutoModelForCausalLM",
    CLASSIFICATION: "AutoModelForSequenceClassification",
    SEQ2SEQ: seq2seq.AUTO_CLASS,
}
_MAPPINGS = {
    CAUSAL_LM: "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    CLASSIFICATION: "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    SEQ2SEQ: seq2seq.MAPPING,
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
# Configuration keys that are sizes or counts of the model (layers, widths, heads, positions,
# the vocabulary): 0 or less builds no model, or one that fails in its first step
# (`hf:gpt2?n_layer=-1`: `__len__() should return >= 0` in every cell), so they are refused
# up front. A key whose default is 0 or less (deberta's type_vocab_size 0) is left alone:
# there 0 means "none", and keys such as num_nextn_predict_layers are not named here.
SIZE_KEY = re.compile(
    r"n_(layer|layers|embd|head|heads|inner|positions|ctx)"
    r"|num_(hidden_layers|layers|decoder_layers|attention_heads|key_value_heads|heads)"
    r"|(encoder|decoder)_(layers|attention_heads)"
    r"|d_(model|ff|kv)|max_position_embeddings|.+_(size|dim)"
)
REFUSED = {
    **CLI_KEYS,
    "dtype": "the model is built in float32; -p sets the precision",
    "torch_dtype": "the model is built in float32; -p sets the precision",
    "num_labels": "use labels=N",
}
OWN_KEYS = "seq_len, task, samples, labels, lr, attn_implementation"  # a text model's
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
    default_config = _default_config(model_type)
    if not seq2seq.is_text_seq2seq(default_config):  # speech models share its auto class
        model_classes[SEQ2SEQ] = None
    runs = _tasks_it_runs(name, model_type, model_classes, default_config)
    options = Options(name)
    options.refuse(REFUSED)
    default_task = CLASSIFICATION if model_type in ENCODERS or CAUSAL_LM not in runs else CAUSAL_LM
    default_task = SEQ2SEQ if SEQ2SEQ in runs else default_task  # an encoder-decoder's
    task = options.choice("task", default_task, TASKS)
    if task not in runs:
        raise name.invalid(_not_runnable(model_type, task, model_classes, runs, default_task))
    seq_len = options.integer("seq_len", SEQ_LEN)
    samples = options.integer("samples", SAMPLES, minimum=5)  # a fifth of it is the test set
    if task != CLASSIFICATION and "labels" in options.left:
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
    attn = attention(name, options)
    config = _config(name, model_type, options.left, default_config)
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
        # The query made it an encoder-decoder (is_encoder_decoder=true): said as for t5.
        decoders = [t for t in runs if t != CLASSIFICATION]
        raise name.invalid(_not_runnable(model_type, task, model_classes, decoders))
    if task == CLASSIFICATION:
        config.num_labels = labels
        if getattr(config, "pad_token_id", None) is None:
            # A decoder classifies at the last token that is not padding, and refuses a batch
            # without a pad id: the last id, which the data never uses.
            config.pad_token_id = vocab - 1
    if task == SEQ2SEQ:  # a decoder start id where T5's rule needs one; <eos> in the vocabulary
        seq2seq_class = getattr(transformers, str(model_classes[task]), None)
        seq2seq.prepare_config(name, config, seq2seq_class, vocab)
    ids = _used_ids(text_config, config, vocab)
    if len(ids) < 2:
        raise name.invalid(f"vocab_size {vocab} leaves fewer than 2 ordinary token ids")
    model_class = model_classes[task]
    build_kwargs = {"attn_implementation": attn} if attn else {}
    thresholds = score_thresholds(seq_len, ids, labels) if labels else None

    def data(seed: int) -> tuple[Any, ...]:
        """(x_train, y_train, x_test, y_test): token ids; the next tokens (causal LM) or
        the sequence's class (classification); a seq2seq model's in seq2seq.py."""
        if task == SEQ2SEQ:
            auto = getattr(transformers, AUTO_CLASSES[task])
            test = test_samples(samples)
            return seq2seq.data(samples, test, seq_len, ids, seed, auto, config, build_kwargs)
        return held_out(samples, lambda n: _tokens(n, seq_len, ids, seed, thresholds))

    def torch_build(device: Any) -> tuple[Any, Any, Any]:
        import torch

        auto = getattr(transformers, AUTO_CLASSES[task])
        model = auto.from_config(copy.deepcopy(config), **build_kwargs)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        return model.to(device), optimizer, LOSSES[task]

    tokens_about = (
        seq2seq.about(ids, seq_len, seq2seq.eos_of(config))
        if task == SEQ2SEQ
        else f"synthetic tokens (an order-1 Markov chain over {len(ids)} ids), seq_len {seq_len}"
    )
    about = f"{model_class} ({task}) from transformers' {model_type} config, random weights; "
    about += tokens_about

    def check() -> Built:
        try:
            import torch
        except ImportError:  # its torch cells are skipped, with the reason; nothing to build
            return Built(about, optimizer="AdamW")
        auto = getattr(transformers, AUTO_CLASSES[task])
        try:
            with torch.device("meta"):  # no memory, no initialisation: shapes only
                model = auto.from_config(copy.deepcopy(config), **build_kwargs)
        except Exception as exc:
            cause = _pad_outside(getattr(text_config, "pad_token_id", None), vocab, model_type)
            raise name.invalid(
                f"transformers cannot build {model_class} from it: "
                + (f"{cause} (transformers: {one_line(exc)})" if cause else one_line(exc))
            ) from None
        check_seq_len(name, model, model_type, seq_len, ids, text_config)  # RoBERTa's offset
        if task == SEQ2SEQ and seq2seq.shift_rule(model) is None:
            raise name.invalid(seq2seq.no_shift_rule(model_class))
        params = parameter_count(model)
        described = f"{model_class}, {params:,} parameters; " + about.split("; ", 1)[1]
        return Built(described, params, "AdamW")

    workload = UserWorkload(
        name=f"hf:{model_type}",
        data=data,
        torch=torch_build,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        description=about,
        output="logits",
        torch_policy=hf_experts.for_policy(name.options.get(hf_experts.KEY)),  # MoE experts
    )
    record = {
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
    }
    if task == SEQ2SEQ:
        record["data"] += seq2seq.RECORDED
    return resolved(name, transformers, workload, check, record)


def _tokens(
    samples: int, seq_len: int, ids: np.ndarray, seed: int, thresholds: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of `samples` sequences: token ids, and the next tokens (causal LM) or, where
    there are class `thresholds`, each sequence's class."""
    if thresholds is None:
        tokens = markov_tokens(samples, seq_len + 1, ids, seed)
        return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])
    x = markov_tokens(samples, seq_len, ids, seed)
    return x, score_labels(x, ids, thresholds)


def attention(name: ZooName, options: Options) -> str | None:
    """The query's attn_implementation (sdpa, eager, ...), taken from it; None: the
    library's default."""
    attn = options.left.pop("attn_implementation", None)
    if attn is not None and not isinstance(attn, str):
        raise name.invalid(f"attn_implementation must be a name (sdpa, eager, ...), not {attn!r}")
    return attn


def causal_lm_loss(logits: Any, y: Any) -> Any:
    """Next-token cross entropy over every position (the float32 logits, as mpbench gives
    them)."""
    from torch.nn.functional import cross_entropy

    return cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def classification_loss(logits: Any, y: Any) -> Any:
    from torch.nn.functional import cross_entropy

    return cross_entropy(logits, y)


LOSSES = {CAUSAL_LM: causal_lm_loss, CLASSIFICATION: classification_loss, SEQ2SEQ: seq2seq.loss}


def _default_config(model_type: str) -> Any:
    """The configuration class's defaults (None where the class cannot build them alone)."""
    from transformers import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]()
    except Exception:
        return None


def _tasks_it_runs(
    name: ZooName, model_type: str, classes: dict[str, str | None], default: Any
) -> list[str]:
    """The tasks hf: can train `model_type` as: those it has a model for, less an
    encoder-decoder's classifier (it reads the decoder's <eos> token and needs decoder
    inputs, which a batch of token ids is not); InvalidInput saying what to use instead
    where there is none."""
    runs = [task for task in TASKS if classes[task]]
    if getattr(default, "is_encoder_decoder", False):
        runs = [task for task in runs if task != CLASSIFICATION]
    if not runs:
        raise name.invalid(_not_runnable(model_type, None, classes, runs))
    return runs


def _not_runnable(
    model_type: str,
    task: str | None,
    classes: dict[str, str | None],
    runs: list[str],
    default: str | None = None,
) -> str:
    """Why hf: does not train `model_type` as `task` (None: as anything), and what to use
    (`default`, the task it trains as unless told; else the first of `runs`, an
    encoder-decoder's seq2seq first). One true sentence whichever task was asked, so that
    two refusals never point at each other (`hf:t5` once said to use causal-lm, and
    `task=causal-lm` to use the classifier)."""
    instead = f"use a decoder ({', '.join(EXAMPLES[:4])}) or an encoder ({', '.join(EXAMPLES[4:])})"
    has = [t for t in TASKS if classes[t]]
    if not has:
        return (
            f"{model_type} has no causal-LM, sequence-classification, seq2seq or "
            f"image-classification model in transformers, and hf: trains only those: {instead}"
        )
    encoder_decoder = CLASSIFICATION in has and CLASSIFICATION not in runs
    classifier = (
        "its sequence classifier needs decoder inputs and <eos> tokens, which a batch of token "
        "ids does not give"
    )
    if not runs:
        return (
            f"{model_type} is an encoder-decoder with no causal-LM or seq2seq model in "
            "transformers, and "
            f"{classifier}: hf: cannot train it; {instead}"
        )
    preferred = default or (SEQ2SEQ if SEQ2SEQ in runs else runs[0])
    if task == CLASSIFICATION and encoder_decoder:
        decoder = " (its decoder)" if preferred == CAUSAL_LM else ""
        return (
            f"{model_type} is an encoder-decoder, and {classifier}: hf: trains it as "
            f"task={preferred}{decoder}, the default"
        )
    return f"{model_type} has no {task} model in transformers: hf: trains it as task={preferred}"


def _pad_outside(pad: Any, vocab: Any, model_type: str) -> str | None:
    """What to say when the pad id is no id of the vocabulary: the embedding's padding row
    (`padding_idx`) must be one of its rows, and transformers says only `Padding_idx must be
    within num_embeddings`."""
    if not isinstance(pad, int) or isinstance(pad, bool) or not isinstance(vocab, int):
        return None
    if pad < vocab:
        return None
    return (
        f"vocab_size {vocab} is not above the {model_type} config's pad_token_id {pad} (the "
        f"embedding's padding row); give a pad_token_id below {vocab} too (e.g. "
        "pad_token_id=0), or a larger vocab_size"
    )


def _config(
    name: ZooName, model_type: str, keys: dict[str, Any], default: Any, own: str = OWN_KEYS
) -> Any:
    """The configuration, built locally; a key the configuration class does not know is
    refused (PretrainedConfig would keep it as a stray attribute, silently), and so is a
    size of 0 or less (SIZE_KEY)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    _check_sizes(name, model_type, keys, default)
    try:
        config = AutoConfig.for_model(model_type, **keys)
    except Exception as exc:
        defaults = default.to_dict() if default is not None else {}
        pad = keys.get("pad_token_id", defaults.get("pad_token_id"))
        cause = _pad_outside(pad, keys.get("vocab_size", defaults.get("vocab_size")), model_type)
        raise name.invalid(
            f"the {model_type} config refused it ({type(exc).__name__}: {one_line(exc)})"
            + (f": {cause}" if cause else "")
        ) from None
    config_class = CONFIG_MAPPING[model_type]
    default = default if default is not None else config_class()
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    known |= set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    stored = config.to_dict()
    # A key the class consumes under another name (llama's rope_theta) is not stored as given.
    unknown = [key for key in keys if key not in known and key in stored]
    if unknown:
        key = unknown[0]
        raise name.invalid(
            f"the {model_type} config ({config_class.__name__}) has no {key!r}"
            f"{close_matches(key, sorted(known))}; mpbench's own keys: {own}"
        )
    return config


def _check_sizes(name: ZooName, model_type: str, keys: dict[str, Any], default: Any) -> None:
    """A size or count of the model (SIZE_KEY) given as 0 or less is refused, unless the
    configuration's own default is 0 or less there (then 0 means "none")."""
    defaults = default.to_dict() if default is not None else {}
    for key, value in keys.items():
        if not SIZE_KEY.fullmatch(key) or not _integer(value) or value > 0:
            continue
        usual = defaults.get(key)
        if _integer(usual) and usual <= 0:
            continue
        shown = f" (the {model_type} config's default is {usual})" if _integer(usual) else ""
        raise name.invalid(f"{key} must be a positive integer, not {value}{shown}")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
