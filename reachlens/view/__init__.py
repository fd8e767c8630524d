"""``reachlens view``: a local, read-only web viewer of runs, question by question.

The question list of any audit or comparison under some run directories (a training audit's pairs and checkpoints
included), filtered by an expression that the address bar holds and :func:`questions_of` accepts; one question with
its prompt as the model saw it, its gold, each side's deployment and K samples grouped by answer; a comparison's
paired figures on the questions shown, marked post hoc when a filter chose them. The server is the standard
library's (:mod:`reachlens.view.server`); the page is one static file and a script with no build step.
"""

from reachlens.store.filter_expr import matches
from reachlens.view.query import View, paired_figures, questions_of, select
from reachlens.view.server import CSP, ViewServer, serve
from reachlens.view.source import AuditSide, QuestionSet, question_sets

__all__ = ["AuditSide", "CSP", "QuestionSet", "View", "ViewServer", "matches", "paired_figures", "question_sets",
           "questions_of", "select", "serve"]
