"""Catalogue data: more exemplar requests for docker, k8s, ci/cd, shell, documentation,
markdown (see :mod:`registry.dispatch.domains.examples_code`). Data only.
"""

from __future__ import annotations

DOCKER = (
    "after a reboot the app does not come back until I start it by hand",
    "the image built on my laptop works but the one from the build server misses files",
    "rebuilding the image reinstalls all dependencies every time",
    "run the database and the app together for local development",
    "the app inside the container cannot write to the mounted folder",
    "pass secrets to the container without baking them into the image",
    "logs from the container disappear when it restarts",
    "the image runs as root, how do I drop privileges",
)

K8S = (
    "the service on the cluster cannot be reached from outside although the pods run",
    "add a health check and resource limits to the deployment",
    "pods restart in a loop right after they start",
    "spread replicas across zones so one failure does not take everything down",
    "run a job on the cluster every night",
    "give one application its own namespace and permissions",
    "the new version rolled out and half the pods fail to pull the image",
)

CICD = (
    "every time we ship, users get errors for a minute while the new version starts",
    "run the lint job only when files of one folder changed",
    "publish the package automatically when we create a release",
    "the build takes forty minutes, how do I cache the slow steps",
    "deploy to staging on every merge and to production on approval",
    "secrets are printed in the build logs",
    "run the tests against a real database in the pipeline",
)

SHELL = (
    "a script that rotates old log files deletes the wrong ones when a name has a space",
    "wait until the database port is open before starting the app",
    "run a command on every file that matches a pattern in all subfolders",
    "count how many times each error appears in a log file",
    "the script works in my terminal but not when another program calls it",
    "make a command available everywhere by adding it to my path",
    "kill the process that is listening on a port",
    "download a list of files and retry the ones that fail",
    "replace a word in all files of a folder from the terminal",
    "keep a long running command going after I log out",
)

DOCUMENTATION = (
    "write a getting started page for new contributors that explains how to run the project",
    "our help article about refunds is confusing, make it clearer for customers",
    "turn these bullet points into a short announcement about the new pricing page",
    "explain in plain words what happens to users' data when they delete their account",
    "document the configuration options of our service with defaults and examples",
    "write the description of every option of our command line tool",
    "summarise the design of our system for a new team member",
    "write a troubleshooting section for the most common installation errors",
    "make our API guide easier to scan with headings and examples",
    "write clear comments explaining what this tricky function does",
    "draft the text for the empty state and error messages of our app",
    "write a tutorial that builds a small example project step by step",
)

MARKDOWN = (
    "the code blocks in my notes do not get syntax highlighting",
    "add a table of contents at the top of a long document",
    "an image in my document does not show up on the repository page",
    "make a checklist with boxes people can tick in an issue",
    "escape an asterisk so it does not turn the text italic",
    "line breaks in my document are ignored when it renders",
)
