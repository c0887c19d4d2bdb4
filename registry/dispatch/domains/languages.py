"""Catalogue data: programming languages outside the seed fleet.

Data only (see :mod:`registry.dispatch.catalogue` for the notation). A fleet without a
specialist for one of these still benefits: a Go or Swift question is recognised as such and
falls back to the base model (a routing gap) instead of going to the nearest specialist.
"""

from __future__ import annotations

from registry.dispatch.domain_spec import DomainSpec

RUST = DomainSpec(
    name="rust",
    aliases=("rust language", "rustlang"),
    strong="""
    ~rust|rustlang|rustc|~cargo|~crate(s)|crates.io|borrow checker|lifetime annotation(s)|
    tokio|serde|clippy|rustup|unsafe rust|trait object(s)|impl trait|rust analyzer
    """,
    weak="ownership|lifetime(s)|trait(s)|borrow|enum(s)|macro(s)",
    files=".rs|cargo.toml|cargo.lock",
    exemplars=(
        "the borrow checker says I cannot borrow this value as mutable more than once",
        "how do I share data between threads with Arc and Mutex in Rust",
        "explain lifetimes in a struct that holds a reference",
        "set up a Cargo workspace with two crates",
    ),
)

GO = DomainSpec(
    name="go",
    aliases=("golang", "go language"),
    strong="""
    golang|goroutine(s)|go routine(s)|go module(s)|go mod|in go|go code|
    go service|go program|go binary|go test|go build|go vet|gofmt|waitgroup|sync.waitgroup|
    context.context|go channel(s)|go generics|go struct(s)|go interface(s)
    """,
    weak="channel(s)|goroutine|defer|interface(s)",
    files=".go|go.mod|go.sum",
    exemplars=(
        "In Go, how do I cancel a goroutine when the request context is done",
        "idiomatic error handling in Go, wrapping and checking errors",
        "build a worker pool with channels and collect the results",
        "my Go service leaks goroutines under load",
    ),
)

JAVA = DomainSpec(
    name="java",
    aliases=("jvm", "java programming"),
    strong="""
    ~java|jvm|jdk|jre|javac|~spring|spring boot|springboot|maven|gradle=0.7|hibernate|jpa|
    junit|lombok|nullpointerexception|classnotfoundexception|jar file(s)|
    tomcat|jakarta|openjdk|garbage collector tuning|heap dump
    """,
    weak="class(es)|interface(s)|exception(s)|bean(s)",
    files=".java|pom.xml|build.gradle=0.7|.jar=0.6|.war",
    exemplars=(
        "Spring Boot application fails to start because a bean cannot be created",
        "how do I write a JUnit test for a service with a mocked repository",
        "explain checked and unchecked exceptions in Java",
        "Maven dependency conflict between two versions of a library",
    ),
)

KOTLIN = DomainSpec(
    name="kotlin",
    aliases=("kotlin language",),
    strong="kotlin|ktor|kotlinx|coroutine scope|data class(es)=0.6|suspend fun|jetpack compose",
    files=".kt|.kts|build.gradle.kts",
    exemplars=(
        "Kotlin: when should I use a sealed class instead of an enum",
        "how do coroutines and suspend functions work in Kotlin",
        "convert this Java class to idiomatic Kotlin",
    ),
)

SWIFT = DomainSpec(
    name="swift",
    aliases=("swift language", "ios development"),
    strong="""
    ~swift|swiftui|uikit|xcode|cocoapods|swift package manager|async let|
    mainactor|combine framework|objective-c|testflight
    """,
    files=".swift|package.swift|.xcodeproj|podfile|.m=0.6",
    exemplars=(
        "SwiftUI view does not update when my observable object changes",
        "how do I run two network calls concurrently in Swift and wait for both",
        "Xcode build fails with a signing certificate error",
    ),
)

CSHARP = DomainSpec(
    name="c#",
    aliases=("csharp", "c sharp", ".net", "dotnet"),
    strong="c#|csharp|.net|dotnet|asp.net|entity framework|linq|nuget|blazor|unity3d|xamarin",
    files=".cs|.csproj|.sln|.razor",
    exemplars=(
        "ASP.NET Core dependency injection: scoped versus singleton services",
        "LINQ query is slow against Entity Framework",
        "async and await in C# deadlock in a UI application",
    ),
)

RUBY = DomainSpec(
    name="ruby",
    aliases=("ruby on rails", "rails"),
    strong="~ruby|~rails|ruby on rails|rubygems|bundler|rspec|~rake|activerecord|sinatra|erb",
    files=".rb|gemfile|gemfile.lock|rakefile|.erb",
    exemplars=(
        "Rails migration to add an index without locking the table",
        "RSpec test for a controller action that redirects",
        "explain blocks, procs and lambdas in Ruby",
    ),
)

PHP = DomainSpec(
    name="php",
    aliases=("laravel",),
    strong="php|laravel|symfony|phpunit|eloquent|~artisan=0.6",
    files=".php|composer.json|composer.lock",
    exemplars=(
        "Laravel queue jobs run twice after a deploy",
        "PHP session is lost after redirect",
    ),
)

OTHER_LANGUAGES = DomainSpec(
    name="other languages",
    aliases=("scala", "r language", "julia", "haskell", "elixir", "lua", "perl", "dart"),
    strong="""
    scala|sbt|akka|haskell|ghc|cabal|monad(s)=0.6|elixir|phoenix framework|erlang|
    clojure|ocaml|f#|julia language|lua|luajit|perl|cpan|~dart|flutter|tidyverse|ggplot2|dplyr|
    cran|rstudio|in r|r script|r package|matlab|fortran|cobol|visual basic|vba|zig|
    crystal lang|~groovy|powershell module
    """,
    files=".scala|.sbt|.hs|.ex|.exs|.erl|.clj|.ml|.fs|.jl|.lua|.pl|.dart|.r|.rmd|.m=0.3|.f90|.zig",
    exemplars=(
        "Haskell: explain the Maybe monad with a small example",
        "in R, how do I reshape a data frame from wide to long with tidyr",
        "Flutter widget rebuilds too often when the state changes",
        "Elixir GenServer crashes and restarts, how do supervisors work",
        "write an Excel VBA macro that copies rows matching a condition",
    ),
)

MOBILE = DomainSpec(
    name="mobile apps",
    aliases=("mobile", "android", "ios"),
    strong="""
    android|android studio|ios app|iphone app|app store|play store|google play|apk|aab|
    react native|~expo=0.6|mobile app(s)|push notification(s)|deep link(s)|adb
    """,
    files="androidmanifest.xml|.apk|info.plist",
    exemplars=(
        "my Android app crashes when the screen rotates",
        "how do I publish an app to the App Store and what does review check",
        "push notifications do not arrive on iOS when the app is in the background",
    ),
)

DOMAINS = (RUST, GO, JAVA, KOTLIN, SWIFT, CSHARP, RUBY, PHP, OTHER_LANGUAGES, MOBILE)
