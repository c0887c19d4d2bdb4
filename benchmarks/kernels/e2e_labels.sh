# The server labels of gpu_e2e.sh, read apart (sourced; uses $R and $SUFFIX when called).
# A label is KIND[+TABLE][-rN][@TREE]: KIND (ours, native, ours-auto-spec, ...), a tile table
# benchmarks/kernels/tables/TABLE.json, its own --max-lora-rank N (default $R), and a source
# tree $TREES/TREE whose hi_moe_lora/ and plugins/ the server runs instead of the checkout's.
# kind_of: the label without its rank and tree (KIND[+TABLE]; gpu_e2e.sh reads the server's kind
# from the part before any "+")
tree_of() { case "$1" in *@*) echo "${1##*@}" ;; esac; }
rank_of() { local l=${1%@*}; case "$l" in *-r[0-9]*) echo "${l##*-r}" ;; *) echo "$R" ;; esac; }
kind_of() { local l=${1%@*}; case "$l" in *-r[0-9]*) echo "${l%-r*}" ;; *) echo "$l" ;; esac; }
table_of() { case "${1%@*}" in *+*) kind_of "${1##*+}" ;; esac; }
# the name of a label's results: KIND[+TABLE][@TREE]-rN plus the run's $SUFFIX
tag() { local t; t=$(tree_of "$1"); echo "$(kind_of "$1")${t:+@$t}-r$(rank_of "$1")$SUFFIX"; }
