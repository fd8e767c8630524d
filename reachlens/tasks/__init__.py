"""Tasks: questions, prompt formats and loaders (``load_task``). Importing registers every built-in."""

from reachlens.tasks import arith as _arith  # noqa: F401  (registers "arith", "arith_hard", "arith_small")
from reachlens.tasks import arith_mc as _arith_mc  # noqa: F401  (registers "arith_mc")
from reachlens.tasks import arith_null as _arith_null  # noqa: F401  (registers "arith_null", the negative control)
from reachlens.tasks._file_loaders import (
    load_arc,
    load_csv,
    load_gsm8k,
    load_jsonl,
    load_logiqa,
    load_math500,
    load_piqa,
    read_csv,
    read_jsonl,
)
from reachlens.tasks.arith import ARITH_ALPHABET, ArithConfig, load_arith
from reachlens.tasks.base import DataError, PromptFormat, Question, Task
from reachlens.tasks.chat import CHAT, render_prompts
from reachlens.tasks.fewshot import FewShot, demonstration_target, draw_demonstrations, fewshot_prompts
from reachlens.tasks.registry import TASKS, load_task, loader_name, register_task

__all__ = [
    "ARITH_ALPHABET",
    "CHAT",
    "ArithConfig",
    "DataError",
    "FewShot",
    "PromptFormat",
    "Question",
    "TASKS",
    "Task",
    "demonstration_target",
    "draw_demonstrations",
    "fewshot_prompts",
    "load_arc",
    "load_arith",
    "load_csv",
    "load_gsm8k",
    "load_jsonl",
    "load_logiqa",
    "load_math500",
    "load_piqa",
    "load_task",
    "loader_name",
    "read_csv",
    "read_jsonl",
    "register_task",
    "render_prompts",
]
