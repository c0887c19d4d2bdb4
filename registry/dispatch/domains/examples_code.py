"""Catalogue data: more exemplar requests for python, debugging, testing, c, c++, low-level.

Tier 3 compares a task with these sentences; they are phrased the way people ask, many of
them without naming the technology, so that meaning alone can route a task. Data only.
"""

from __future__ import annotations

PYTHON = (
    "sort a list of records by two fields, one ascending and one descending",
    "merge two dictionaries so that the values of the second one win",
    "read a huge file lazily instead of loading it all into memory",
    "results come back in a different order when I use several worker processes",
    "a class attribute is shared between all instances and changes everywhere",
    "replace a long chain of if and elif with a lookup table of handler functions",
    "the lambdas I create in a loop all use the last value of the loop variable",
    "why does 0.1 plus 0.2 not equal 0.3 and how do I compare floats",
    "a global variable is not updated when I assign it inside a function",
    "two modules import each other and one of them sees a partially initialised module",
    "relative imports fail when I run a file inside my package directly",
    "parse command line arguments with defaults and a help message",
    "remove duplicates from a list but keep the original order",
    "format a number with thousands separators and two decimals",
    "handle time zones correctly when I store timestamps",
    "write a context manager that times a block of code",
    "an enum with string values that I can compare with plain strings",
    "make a small HTTP call with a timeout and retries",
    "my web scraper gets blocked, how do I slow it down politely",
    "schedule a function to run every ten minutes inside my program",
    "install a specific version of a library and pin it for the team",
    "my package works on my machine but import fails on a colleague's",
    "a function returns None and I expected a value",
    "speed up a loop that calls the same expensive function with the same inputs",
    "I want a dictionary that gives a default value for missing keys",
    "iterate over two lists at the same time",
    "write the contents of a nested structure to a file and read it back",
    "why does my program use so much memory for a list of small objects",
    "send an email with an attachment from a script",
    "build a command line tool that other people can install",
    "what is the difference between is and == for comparing values",
    "my recursive function hits the maximum recursion depth",
    "a regular expression that extracts all dates from a text",
    "typing the return value of a function that may return nothing",
)

DEBUGGING = (
    "the program hangs forever and I do not know where",
    "it works in the debugger but fails when I run it normally",
    "find out which line raised the error in a long log",
    "the value is correct before the function call and wrong after it",
    "intermittent failure that only happens under load",
    "how do I inspect the state of my program when it crashes",
    "narrow down which of the last fifty commits introduced the bug",
    "my script exits without any error message",
)

TESTING = (
    "write tests for a function that reads from the network without calling the network",
    "how do I check that my function raises an error for bad input",
    "freeze the clock in a test so the expiry logic can be checked",
    "a test fails only when the whole suite runs, not on its own",
    "tests share state and the order they run in changes the result",
    "how many tests are enough and what should I test first",
    "write a test that checks the log message my function emits",
    "replace the database with an in-memory one for the tests",
    "generate many random inputs to test a parser",
    "tests pass locally but fail on the build server",
    "check that a function was called with the right arguments",
)

C = (
    "my program's memory keeps growing, the leak checker points to a helper that allocates",
    "the compiler warns about an implicit declaration and the program crashes at runtime",
    "sizeof on an array parameter returns the size of a pointer",
    "copying a string into a fixed size buffer overflows",
    "read binary records from a file into structs",
    "why does my program print garbage after the string",
    "return an array from a function without it going out of scope",
    "the program works in debug mode and crashes when optimised",
    "pass a callback function with a context pointer",
    "parse command line options in a small utility written in C",
    "the output of my child process is duplicated when redirected to a file",
    "write a linked list with insert and delete and free everything at the end",
    "two source files define the same global variable and the link fails",
    "my header is included twice and I get redefinition errors",
    "build a shared library and load it at runtime",
    "a signal handler that safely tells the main loop to stop",
)

CPP = (
    "an object is copied when I expected it to be moved",
    "the iterator I kept becomes invalid after I insert into the container",
    "implement a class that owns a file handle and closes it exactly once",
    "my template class fails to link when the implementation is in a separate file",
    "ordered map or hash map for millions of integer keys",
    "a reference to a local variable is returned and the caller reads garbage",
    "write a thread pool that runs tasks from a queue",
    "why does my base class destructor need to be virtual",
    "overload the output operator for my class",
    "capture variables in a lambda by value or by reference",
    "compile errors from a template instantiation are unreadable",
    "replace raw new and delete with smart pointers in this class",
    "a static object is used before it is constructed during startup",
    "add a unit test framework to the build of a library",
)

LOW_LEVEL = (
    "what happens in the processor when a value crosses a cache line",
    "write a ring buffer that one thread fills and another drains without locks",
    "what is the difference between the stack and the heap and what ends up where",
    "how does virtual memory map addresses to physical pages",
    "write bytes to a device register at a fixed address on a small board",
    "the firmware hangs when an interrupt fires during a flash write",
    "count the set bits of an integer quickly",
    "pack several flags into one byte and read them back",
    "why is my multithreaded counter wrong without an atomic operation",
    "what does the processor reorder and how do barriers prevent it",
    "write a tiny memory allocator for fixed size blocks",
    "read a sensor over the serial bus of a microcontroller",
    "why is iterating over a linked list slower than over an array",
    "make a busy loop that waits for a hardware flag",
    "what does the operating system do on a page fault",
)
