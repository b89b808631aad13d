"""An import-linter contract type that allows instead of forbids (lint tool; imports
import-linter and grimp only).

import-linter's `forbidden` contract is a deny-list: a module added later is allowed until
someone remembers to list it. An `allow_list` contract inverts that: each module of
`source_modules` (packages, with all their descendants) may import only

- modules inside the source packages themselves, and
- modules matched by `allowed_modules` (import-linter module expressions: `a.b` is that
  module only, `a.b.*` its children, `a.b.**` all its descendants),

and every other import of the root package breaks it. External packages are not checked.
Only direct imports count (`allow_indirect_imports` in import-linter's terms): going through
an allowed facade is the point.

Registered in pyproject.toml under `contract_types`; `lint-imports` puts the working
directory on `sys.path`, so this module is found when it runs from the repository root.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain import helpers

__all__ = ["AllowListContract"]


class AllowListContract(Contract):
    type_name = "allow_list"

    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_modules = fields.ListField(subfield=fields.ModuleExpressionField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = {m.name for m in helpers.module_expressions_to_modules(
            graph=graph, expressions=self.source_modules, as_packages=True)}  # type: ignore
        allowed = {m.name for m in helpers.module_expressions_to_modules(
            graph=graph, expressions=self.allowed_modules, as_packages=False)}  # type: ignore
        root = self.session_options["root_packages"][0] if self.session_options.get(
            "root_packages") else next(iter(sources)).split(".")[0]
        illegal: list[dict[str, Any]] = []
        for importer in sorted(sources):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported in sources or imported in allowed:
                    continue
                if imported != root and not imported.startswith(root + "."):
                    continue  # an external package
                lines = sorted(d["line_number"] for d in graph.get_import_details(
                    importer=importer, imported=imported))
                illegal.append({"importer": importer, "imported": imported, "lines": lines})
        output.verbose_print(verbose, f"{len(illegal)} import(s) outside the allow-list.")
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Imports outside the allow-list:")
        output.new_line()
        for link in check.metadata["illegal"]:
            lines = ", ".join(map(str, link["lines"]))
            output.print_error(f"- {link['importer']} -> {link['imported']} (l.{lines})",
                               bold=False)
        output.new_line()
