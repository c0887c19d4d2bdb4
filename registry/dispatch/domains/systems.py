"""Catalogue data: c, c++, low-level (the seed's ``systems-lora`` domains).

Data only (see :mod:`registry.dispatch.catalogue` for the notation). The letter ``c`` alone is
weak (a grade, a vitamin, a key); phrases such as ``in c`` or ``c program`` are strong.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import LANGUAGE_OUTRANKS, DomainSpec

C = DomainSpec(
    name="c",
    aliases=("c language", "c programming", "ansi c", "c99", "c11", "c17"),
    strong="""
    c-syntax=0.8|in c|c program(s)|c code|c library|c libraries|c extension(s)|c project|
    c function(s)|
    c struct(s)|c string(s)|c api|c file(s)|c source|written in c|c compiler|plain c|c99|c11|
    c17|ansi c|malloc|calloc|realloc|printf|fprintf|sprintf|snprintf|scanf|strcpy|strncpy|
    strlen|strcmp|memcpy|memmove|memset|fgets|fopen|stdio|stdio.h|stdlib.h|string.h|
    stdint.h|#include|#define|#ifdef|#pragma|gcc|clang|segfault|segmentation fault|
    core dump(ed)|valgrind|addresssanitizer|asan|ubsan|undefined behavior|undefined behaviour|
    header file(s)|null pointer|dangling pointer(s)|pointer arithmetic|double free|
    use-after-free|heap-use-after-free|stack smashing|buffer overflow|off-by-one=0.4|
    glibc|libc|musl|posix|execve|execvp|waitpid|pthread(s)|pthread_create|mutex=0.5|
    mmap|munmap|volatile=0.7|linker=0.8|undefined reference|static linking|dynamic linking|
    shared library|shared object|ldd|ld_library_path|symbol(s)=0.4|
    python c extension|c-api|py_decref|py_incref|pyobject|pylist_getitem|gdb=0.8|
    function pointer(s)|struct padding|bit field(s)|
    int main=0.8|sizeof=0.8|size_t=0.8|uint8_t=0.8|uint32_t=0.8|uint64_t=0.8|int32_t=0.8|
    unsigned=0.5|typedef=0.8|errno=0.8|perror
    """,
    weak="""
    ~c|pointer(s)|struct(s)|array(s)|macro(s)|header(s)|compile(r,d)|compilation|stack|heap|
    memory leak(s)|leak(s)|free|allocation|allocate|bytes|buffer(s)|fork|exec|signal(s)
    """,
    files="""
    .c|.h=0.7|makefile|gnumakefile|*.mk=0.7|configure.ac=0.7|meson.build=0.7
    """,
    outranks=LANGUAGE_OUTRANKS,
    exemplars=(
        "why does my C program crash with a segmentation fault when I free this pointer",
        "write a function in C that reverses a string in place",
        "explain the difference between an array and a pointer in C",
        "my program reads uninitialised memory, how do I find where",
        "the linker says undefined reference although the function is declared in the header",
        "how do I read a file line by line in C without overflowing the buffer",
        "write a Makefile that rebuilds objects when headers change",
        "implement a dynamic array that grows when it is full",
        "static or dynamic linking for a library we ship to customers",
        "a buffer overflow only shows up in the optimised release build",
        "the address sanitizer reports a heap use after free, how do I read it",
        "how do fork and exec work together, and why does output appear twice",
        "my struct is bigger than the sum of its fields",
        "why does the compiler optimise away my loop that polls a flag",
        "implement a hash map with open addressing in C",
        "my Python extension module written in C leaks references",
    ),
)

CPP = DomainSpec(
    name="c++",
    aliases=("cpp", "cplusplus", "c plus plus", "modern c++", "cxx"),
    strong="""
    c++|cpp|cxx|g++|clang++|c++11|c++14|c++17|c++20|c++23|std|stl|std::vector|std::string|
    std::move|std::thread|std::atomic|std::unique_ptr|std::shared_ptr|std::map|
    std::unordered_map|std::optional|std::variant|std::function|std::string_view|
    unique_ptr|shared_ptr|weak_ptr|make_unique|make_shared|string_view|constexpr|consteval|
    noexcept|nullptr|raii|rule of five|rule of three|rule of zero|move semantics|
    move constructor|copy constructor|copy elision|rvalue(s)|lvalue(s)|perfect forwarding|
    destructor(s)|virtual function(s)|vtable|pure virtual|template metaprogramming|
    variadic template(s)|sfinae|cmake|cmakelists|boost|qt=0.6|iostream|cout|cerr|
    stringstream|lambda capture|header-only|precompiled header(s)|extern template(s)|msvc|
    visual c++=0.5|visual studio=0.4|googletest|gtest|catch2|clang-tidy|vcpkg|conan|
    undefined behavior sanitizer|template(s)=0.6|namespace std|operator overloading|
    smart pointer(s)|object lifetime|dangling reference|iterator invalidation|
    n-api|napi|node-addon-api|native addon|pybind11=0.6
    """,
    weak="""
    class(es)|object(s)|inheritance|polymorphism|overload*|reference(s)|vector(s)|
    compile time|header(s)|library|libraries|constructor(s)|const
    """,
    files="""
    .cpp|.cc|.cxx|.hpp|.hh|.hxx|.inl|.h=0.6|cmakelists.txt=1.2|*.cmake|conanfile.txt|
    conanfile.py=0.6|vcpkg.json|binding.gyp
    """,
    outranks=LANGUAGE_OUTRANKS,
    exemplars=(
        "why is my copy constructor called instead of the move constructor",
        "explain RAII and when to use unique_ptr versus shared_ptr",
        "my C++ program crashes after the vector grows, the references I kept are invalid",
        "write a thread safe queue with a mutex and a condition variable",
        "this template code gives a wall of compiler errors I cannot read",
        "how do I configure the build to use C++20 for one target only",
        "what are the rules for when the compiler generates the destructor and copy operations",
        "returning a view of a temporary string gives garbage",
        "a lock-free single producer single consumer ring buffer with atomics",
        "speed up the compile time of a huge source file",
        "why does the destructor of my object run twice when I put it in a container",
        "undefined reference to the vtable of my class at link time",
        "should a function take its argument by reference, by pointer or by value",
        "write a small class hierarchy with virtual methods and explain dynamic dispatch",
    ),
)

LOW_LEVEL = DomainSpec(
    name="low-level",
    aliases=(
        "low level",
        "low-level programming",
        "systems programming",
        "systems",
        "embedded",
        "embedded systems",
        "assembly",
        "operating systems",
    ),
    strong="""
    low-level|low level|systems programming|assembly|assembler|asm=0.8|x86|x86-64|x86_64|
    aarch64|arm64=0.7|risc-v|riscv|simd|avx|avx2|avx-512|avx512|sse2|sse4|neon=0.6|
    intrinsic(s)|cache line(s)|false sharing|memory barrier(s)|memory fence(s)|
    memory order(ing)|memory_order_acquire|memory_order_release|acquire-release|
    lock-free|wait-free|compare-and-swap|cas loop|atomic(s)=0.6|syscall(s)|system call(s)|
    kernel module(s)|linux kernel|device driver(s)|driver(s)=0.4|firmware|embedded=0.8|
    microcontroller(s)|mcu|stm32|arduino|esp32|raspberry pi=0.6|rtos|freertos|bare metal|
    bare-metal|bootloader|interrupt(s)|interrupt handler|isr|dma|mmio|memory-mapped|
    memory mapped|peripheral register(s)|register(s)=0.4|elf|abi|calling convention|
    endianness|endian|little-endian|big-endian|bit manipulation|bitwise|bit twiddling|
    bitmask(s)|alignment=0.7|packed struct|__attribute__|page fault(s)|tlb|
    virtual memory|page table(s)|allocator(s)|arena allocator|bump allocator|jemalloc|
    tcmalloc|objdump|disassembl*|linker script|perf stat|perf record|cache miss(es)|
    branch prediction|branch misprediction|instruction pipeline|cpu cache|l1 cache|
    l2 cache|numa|epoll|io_uring|zero-copy|ring buffer
    """,
    weak="""
    memory|cpu|hardware|bits|bytes|performance|kernel|latency|throughput|os|scheduler
    """,
    files=""".s|.asm|.ld=0.8|.lds=0.8|.ko=0.8""",
    exemplars=(
        "explain struct alignment and padding on ARM",
        "how do I read a hardware register in a loop without the compiler removing the read",
        "write an interrupt handler for a timer on a microcontroller",
        "what does the volatile keyword guarantee and why is it not enough between threads",
        "which memory orderings do I need for a lock-free queue",
        "two threads updating neighbouring counters are slow, is it false sharing",
        "write a simple arena allocator with proper alignment",
        "memory mapping a large file versus reading it in chunks, which is faster",
        "how does a system call switch from user space to the kernel",
        "vectorise this loop with SIMD intrinsics",
        "why is my program slower when data is not aligned to cache lines",
        "read the disassembly and explain why the compiler generated this code",
        "how do I write a character device driver",
        "byte order: how do I convert integers read from the network",
    ),
)

DOMAINS = (C, CPP, LOW_LEVEL)
