"""Catalogue data: documentation, markdown (the seed's ``docs-lora`` domains).

Data only (see :mod:`registry.dispatch.catalogue` for the notation). Documentation artefacts
are decisive: a docstring for C++ code or a README for a Python tool is documentation work.
``markdown`` alone is ambiguous (a retail price cut) and needs corroboration.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

DOCUMENTATION = DomainSpec(
    name="documentation",
    aliases=("docs", "technical writing", "docs site", "api documentation", "user docs"),
    decisive="""
    readme=1.6|docstring(s)=1.6|doxygen=1.6|jsdoc=1.6|javadoc=1.6|tsdoc=1.6|numpydoc=1.6|
    sphinx=1.5|autodoc=1.5|mkdocs=1.5|docusaurus=1.5|readthedocs|read the docs|
    api reference=1.5|api docs=1.5|reference docs|reference page(s)|changelog=1.6|
    release notes=1.6|migration guide=1.6|upgrade guide=1.5|user guide=1.5|
    install guide=1.4|installation guide=1.4|getting started guide|quickstart=1.2|
    tutorial(s)=0.9|how-to guide(s)=1.3|man page(s)=1.5|manpage|runbook(s)=1.4|
    architecture decision record(s)|adr(s)=1.2|design doc(s)=1.3|contributing guide=1.5|
    contributing=1.0|code of conduct=1.2|style guide=1.2|faq=1.0|faq page=1.4|
    onboarding guide=1.4|glossary=1.0|openapi description(s)=1.3|docs site=1.5|
    documentation site=1.5|doc comment(s)=1.5|code comments=1.2
    """,
    strong="""
    documentation=1.2|~docs=0.9|document=0.5|documented=0.6|documenting=0.8|
    technical writing|technical writer|copy edit*|copyedit*|~proofread*|rewrite this paragraph|
    grammar=0.8|grammer=0.8|tone=0.6|wording=0.6|phrasing=0.6|readability=0.6|
    intro section|introduction section|section=0.4|guide=0.6|manual=0.5|handbook=0.6|
    announce=0.5|announcement=0.5|breaking change(s)=0.6|deprecation notice|
    diataxis|explanation pages|non-technical audience|audience=0.5|reader(s)=0.5|
    restructuredtext=0.8|rst=0.7|asciidoc=0.8|docs-as-code|api docs=1.2|openapi=0.5|
    swagger=0.4|summaries=0.4|parameter descriptions|response examples|examples section
    """,
    weak="""
    write up|write-up|explain to users|users|customers|describe|description(s)|summary|
    summarize|summarise|outline|draft|page(s)|wiki|notes|comment(s)|clarify|clear|concise
    """,
    deliverables="""
    ~document|readme|docstring(s)|doxygen|jsdoc|javadoc|tsdoc|numpydoc|doc comment(s)|
    comments|code comments|header comments|documentation|docs|api docs|api reference|
    reference docs|reference page(s)|docs page(s)|docs site|documentation site|changelog|
    changelog entry|release notes|migration guide|upgrade guide|user guide|install guide|
    installation guide|getting started guide|getting started page|quickstart|tutorial(s)|
    how-to guide(s)|man page(s)|runbook(s)|architecture decision record(s)|adr|
    design doc(s)|contributing guide|faq|faq page|onboarding guide|glossary|help article(s)|
    troubleshooting section|usage section|installation section|wiki page(s)
    """,
    files="""
    readme=1.6|readme.md=1.6|readme.rst=1.6|readme.txt=1.5|changelog=1.6|changelog.md=1.6|
    history.md=1.2|contributing.md=1.6|code_of_conduct.md=1.5|security.md=0.8|
    .rst=1.0|.adoc=1.0|mkdocs.yml=1.5|docs/=0.6|doc/=0.5|docs/conf.py=1.5|
    docusaurus.config.js=1.5|.readthedocs.yaml=1.5|man/=0.8|*.1=0.6|adr/=1.0
    """,
    yields_to_code=True,
    exemplars=(
        "write a README with installation, usage and a table of the command line flags",
        "add docstrings to the public functions of this module",
        "document the ownership and thread-safety of these C functions in header comments",
        "our onboarding guide is forty pages long and nobody reads it, how should we split it",
        "write release notes for these changes for our users",
        "draft a migration guide from version one to version two of our SDK",
        "rewrite this paragraph of the install guide to be shorter and more direct",
        "review this explanation of our rate limits for a non-technical audience",
        "how should we announce a breaking change so people notice it",
        "write an architecture decision record for moving to webhooks",
        "which docstring style should a scientific library use",
        "structure the docs into tutorials, how-to guides, reference and explanation",
        "write a man page for our sync subcommand",
        "fix the grammar and tone of the introduction of our docs",
        "add descriptions and examples to the API reference of the orders endpoints",
        "write a contributing guide with the development setup and a pull request checklist",
        "the documentation build fails because autodoc cannot import the package",
        "draft a frequently asked questions page from these support tickets",
        "write a runbook for the on-call engineer when the queue backs up",
        "turn this raw list of commits into a changelog entry",
    ),
)

MARKDOWN = DomainSpec(
    name="markdown",
    aliases=("md", "markup", "commonmark", "gfm"),
    strong="""
    ~markdown=1.1|commonmark|gfm|github flavored markdown|github-flavored markdown|mdx=0.8|
    markdownlint|markdown-it|remark=0.6|pandoc|mermaid=1.0|front matter|frontmatter|
    table of contents|toc=0.5|anchor link(s)|heading anchor(s)|heading(s)=0.5|
    collapsible section|details tag|code fence(s)|fenced code block(s)|md013|md033|
    admonition(s)|obsidian=0.6|jekyll|hugo=0.6|static site generator=0.6
    """,
    weak="table|tables|list|bullet(s)|link(s)|bold|italic|render(s)|rendered|renders",
    files=".md=0.7|.markdown=0.8|.mdx=0.8|.markdownlint.json=1.3|.markdownlint.yaml=1.3",
    yields_to_code=True,
    exemplars=(
        "my table shows up as a pile of pipes and dashes instead of a table",
        "how do I make a collapsible section in a README",
        "link to a heading in another markdown file",
        "embed a sequence diagram in a markdown document so it renders on GitHub",
        "convert this reStructuredText page to Markdown and keep the admonitions",
        "the linter complains about long lines and inline HTML in our docs",
        "nested bullet lists do not render with the right indentation",
    ),
)

DOMAINS = (DOCUMENTATION, MARKDOWN)
