"""Catalogue data: cuda, gpu optimization (``cuda-lora``) and math, algorithms, proofs
(``math-lora``).

Data only (see :mod:`registry.dispatch.catalogue` for the notation). ``kernel`` and
``optimize`` alone are weak on purpose: they must not decide between GPU, systems and maths.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

CUDA = DomainSpec(
    name="cuda",
    aliases=("cuda programming", "cuda c++", "nvidia cuda"),
    strong="""
    cuda=1.3|cuda*=1.2|nvcc|__global__|__device__|__host__|__shared__|__syncthreads|
    __shfl*|__ldg|threadidx|blockidx|blockdim|griddim|warp(s)=0.9|warp-level|warp divergence|
    warp shuffle|shared memory=0.6|coalesced|coalescing|uncoalesced|bank conflict(s)|cublas*|
    cudnn|cufft|curand|cusparse|cusolver|cutlass|thrust|thrust::sort|nccl|nccl_debug|
    nsight|nsight compute|nsight systems|nvprof|ncu|nvidia-smi|compute-sanitizer|
    cuda-memcheck|triton kernel(s)|openai triton|triton=0.7|cupy|numba.cuda|pycuda|
    tensor core(s)|hmma|wmma|mma.sync|sm_80|sm_90|ptx|kernel launch(es)|launch overhead|
    cuda graph(s)|cuda stream(s)|streams=0.4|pinned memory|page-locked|unified memory|
    device memory|host memory|host-to-device|device-to-host|cudamemcpy*|grid-stride|
    cooperative groups|device-side assert|illegal memory access|block size=0.6|
    num_warps|block_size=0.5|occupancy|register spilling|cuda out of memory|
    outofmemoryerror=0.6|torch.cuda|cuda_launch_blocking|atomicadd|atomiccas|__restrict__=0.6
    """,
    weak="""
    ~kernel(s)|threads per block|block(s)|grid|atomic(s)|atomicadd|reduction|scan|
    prefix sum|histogram|matmul|gemm|fp16|bf16|fp8|int8|quantiz*|vram|nvidia|device|
    out of memory|oom|memory bound|bandwidth
    """,
    files=".cu|.cuh|.ptx|.cubin|.fatbin|kernels/=0.4",
    outranks=("c", "c++", "low-level", "python", "debugging", "testing"),
    exemplars=(
        "write a CUDA kernel that adds two vectors and explain the launch configuration",
        "each thread reads its neighbour's value from shared memory and gets stale data",
        "my matrix multiply on the graphics card is much slower than the vendor library",
        "how do I tile a matrix multiplication with shared memory",
        "copying data between host and device takes longer than the computation",
        "overlap memory copies with kernel execution using streams",
        "the model runs out of memory on the accelerator halfway through training",
        "illegal memory access was encountered only for large inputs",
        "incrementing one global counter from millions of threads is slow",
        "why should neighbouring threads access neighbouring addresses",
        "warp-level reduction with shuffle instructions",
        "capture many tiny kernel launches into a graph to cut launch overhead",
        "write a fused kernel in Triton and choose the block size",
        "move this numpy array computation to the GPU with CuPy",
        "the profiler says the kernel is memory bound, what can I still gain",
        "all-reduce across four GPUs hangs on one node",
        "how many threads per block should I launch and how do I compute the grid size",
        "device-side assert triggered somewhere during training, how do I locate it",
        "make sure half precision matrix multiplies run on the tensor cores",
        "a parallel histogram on the device gives counts that are too low",
    ),
)

GPU = DomainSpec(
    name="gpu optimization",
    aliases=(
        "gpu",
        "gpus",
        "gpu programming",
        "gpu computing",
        "gpu optimisation",
        "gpu performance",
        "hpc",
        "accelerators",
    ),
    strong="""
    gpu(s)=1.1|gpu optimization|gpu optimisation|gpgpu|graphics card(s)=0.6|~accelerator=0.5|
    h100|h200|a100|v100|l40s|rtx=0.6|mi300|roofline|arithmetic intensity|memory-bound|
    compute-bound|compute bound|flashattention|flash attention|mixed precision|tensorrt|
    opencl|rocm|hip kernel|vulkan compute|metal shaders=0.6|sm occupancy|
    streaming multiprocessor(s)|
    sms=0.5|hbm|gpu memory|gpu utilization|gpu kernel(s)|on the gpu|to the gpu|multi-gpu|
    data parallel=0.5|model parallelism|tensor parallelism
    """,
    weak="""
    ~kernel(s)|throughput|latency|speed up|speedup|optimi*|parallel|parallelism|
    fp16|bf16|precision|batch size|profil*|bandwidth
    """,
    outranks=("c", "c++", "low-level", "python", "debugging", "testing"),
    exemplars=(
        "is this kernel compute bound or memory bound on an H100",
        "how do I speed up inference on the GPU with mixed precision",
        "GPU utilisation stays at 30 percent while training, where is the bottleneck",
        "work out the arithmetic intensity of a tile and place it on the roofline",
        "would this image filter be faster on the graphics card",
        "the accelerator sits idle between batches while the data is loaded",
        "sort a hundred million keys on the GPU",
        "choose tile sizes and the number of warps for a matrix kernel",
        "reduce the memory traffic of an attention kernel by fusing the steps",
    ),
)

MATH = DomainSpec(
    name="math",
    aliases=("mathematics", "maths", "applied math", "statistics", "probability"),
    deliverables="closed form|closed-form|derivative|gradient formula|expected value",
    strong="""
    math|maths|mathematics|mathematical(ly)|probability|probabilities|statistic(s)=0.7|
    equation(s)|integral(s)|integrate=0.6|derivative(s)|differentiate|calculus|algebra|
    linear algebra|eigenvalue(s)|eigenvector(s)|determinant(s)|det|matrix inverse|
    modular arithmetic|mod=0.6|modulo=0.6|prime(s)=0.8|prime number(s)|gcd|lcm|fermat|
    euler|bayes|bayesian=0.7|combinatorics|permutation(s)|combination(s)=0.7|binomial|
    factorial|expected value|expectation=0.7|variance=0.7|standard deviation=0.7|
    distribution(s)=0.5|normal distribution|poisson|convergence|converge(s)|diverge(s)|
    series=0.5|geometric series|harmonic series|closed form|sum of=0.5|limit(s)=0.5|
    lagrange multiplier(s)|lagrange|minimize|maximize|polynomial(s)|logarithm(s)|
    exponent(s)=0.5|fibonacci|recurrence(s)|recurrence relation|geometry|triangle(s)|
    trigonometry|vector space(s)|number theory|graph theory|topology|
    differential equation(s)|ode|pde|fourier|laplace transform|taylor series|
    square root|irrational|rational number(s)|real number(s)|complex number(s)|
    weighted average|weighted mean|mean of means|unweighted|arithmetic mean|median=0.4|
    birthday problem|dice=0.6|coin flip(s)|coin toss|odds=0.6|random variable(s)|
    markov chain(s)|monte carlo=0.6|game theory|set theory|logic=0.4|modular|congruence
    """,
    weak="""
    formula|compute|calculate|solve|function|matrix|vector(s)|average|mean|sum|
    ~optimize|optimization|~proof|explain why|intuition|intuitive
    """,
    files=".tex=0.6|.bib=0.3",
    exemplars=(
        "what is the probability that two people in a group share a birthday",
        "compute a large power modulo a prime by hand",
        "does this infinite sum converge and to what value",
        "explain why the determinant of a product is the product of determinants",
        "solve this system of linear equations and explain the steps",
        "minimise a function subject to a constraint",
        "how many ways can people sit around a round table",
        "expected number of dice rolls until the first six",
        "a test has a small false positive rate, what is the chance I am actually sick",
        "is there a closed form for the sum of powers of two",
        "derive the variance of the sum of independent random variables",
        "integrate this function by substitution",
        "count the passwords of a given length that contain at least one digit",
        "why is the average of the group averages different from the overall average",
        "what is an eigenvector intuitively",
        "explain the central limit theorem with an example",
        "how do I compute the odds of drawing two aces from a deck of cards",
    ),
)

ALGORITHMS = DomainSpec(
    name="algorithms",
    aliases=(
        "algorithm",
        "algorithmic",
        "data structures",
        "dsa",
        "algorithms and data structures",
    ),
    deliverables="""
    time complexity|space complexity|complexity analysis|big-o|big o|running time|
    asymptotic bound|recurrence
    """,
    strong="""
    complexity-notation=1.0|algorithm(s)=0.9|algorithmic|complexity=0.8|time complexity|
    space complexity|big-o|big o|
    big-theta|big-omega|asymptotic|amortized|amortised|dynamic programming|
    greedy algorithm|greedy=0.7|binary search|quicksort|quick sort|mergesort|merge sort|
    heapsort|heap sort|radix sort=0.6|sorting algorithm(s)|dijkstra|bellman-ford|
    floyd-warshall|bfs|dfs|breadth-first|depth-first|topological sort|
    minimum spanning tree|kruskal|prim's algorithm|union-find|disjoint set(s)|trie|
    segment tree|fenwick tree|red-black tree|avl tree|b-tree=0.5|binary tree|
    binary search tree|linked list|priority queue|min-heap|max-heap|hash table=0.6|
    np-complete|np-hard|p = np|p vs np|3-sat|sat solver|master theorem|shortest path|
    knapsack|backtracking|memoization|divide and conquer|leetcode|two pointers|
    sliding window=0.6|graph algorithm(s)|max flow|matching algorithm|edit distance|
    longest common subsequence|inverse ackermann|path compression|union by rank|
    halting problem|undecidable|decidable|turing machine|reduction=0.6|coin change
    """,
    weak="""
    sort|sorting|search|graph|tree|heap|queue|stack|hash|efficient|optimal|n log n|
    log n|worst case|best case|average case|recursion|recursive|~optimize
    """,
    exemplars=(
        "what is the time complexity of this nested loop",
        "design an algorithm for the median of two sorted arrays in logarithmic time",
        "why does the greedy approach fail for this set of coin values",
        "find the shortest route between two cities on a weighted road map",
        "explain dynamic programming with the knapsack problem",
        "why is building a heap from an array linear time",
        "solve this recurrence relation for the running time",
        "what is the amortised cost of appending to a dynamic array",
        "detect a cycle in a directed graph",
        "why is comparison sorting at least n log n",
        "give an example function where big O, big Theta and big Omega differ",
    ),
)

PROOFS = DomainSpec(
    name="proofs",
    aliases=("proof", "formal proofs", "theorem proving", "formal verification", "logic"),
    decisive="""
    prove=1.4|proving=1.3|~proof=1.3|proofs=1.3|proof by induction=1.8|
    proof by contradiction=1.8|formal proof|rigorous proof|prove that=1.8|show that=0.8
    """,
    deliverables="""
    prove|derive|deduce|derivation|formal proof|rigorous proof|proof sketch|induction proof
    """,
    strong="""
    theorem(s)|lemma(s)|corollary|induction=0.8|contradiction=0.7|qed|axiom(s)|
    derive=0.8|derivation=0.8|lean4|lean prover|coq|isabelle|agda|tla+|formal verification|
    invariant(s)=0.5|pigeonhole|counterexample|if and only if|iff|necessary and sufficient|
    well-ordering|infinitely many|bijection|injective|surjective|well-defined
    """,
    weak="argument|why is it true|justify|rigorous|formally|statement|hypothesis",
    files=".lean|.v=0.4|.thy",
    exemplars=(
        "prove that the square root of two is irrational",
        "prove by induction that the sum of the first n odd numbers is n squared",
        "why are there infinitely many primes, give me the argument",
        "write a rigorous proof that every tree with n vertices has n minus one edges",
        "show that this algorithm terminates and is correct using an invariant",
        "prove that the halting problem is undecidable",
        "is this proof by contradiction valid or does it assume what it proves",
        "help me formalise this lemma in Lean",
        "explain how to prove that a function is a bijection",
    ),
)

DOMAINS = (CUDA, GPU, MATH, ALGORITHMS, PROOFS)
