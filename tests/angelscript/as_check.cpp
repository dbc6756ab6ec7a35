// Offline compile check for rulka's game plugins (tests/angelscript/README.md).
//
// Configures an AngelScript engine from a text description of a host's API (the script helper
// add-on's ConfigEngineFromStream: every type, method, property, enum and funcdef registered with
// a dummy implementation), then builds the given scripts with the script builder add-on (which
// also strips metadata such as Openplanet's [Setting ...]). Nothing is executed.
//
//   as_check [--ep PROP=VALUE]... CONFIG SCRIPT...
//
// Output: one line per compiler message, "SECTION:ROW:COL: ERR|WARN|INFO: text"; one line per
// config declaration the engine refused, "CONFIG:LINE: refused: text"; then a summary line.
// Exit status: 0 built, 1 build failed, 2 usage, 3 config declarations refused.
#include <angelscript.h>
#include <scripthelper.h>
#include <scriptbuilder.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace AngelScript;

static int g_errors = 0;

static void OnMessage(const asSMessageInfo *msg, void *)
{
    const char *kind = msg->type == asMSGTYPE_ERROR ? "ERR" : msg->type == asMSGTYPE_WARNING ? "WARN" : "INFO";
    if (msg->type == asMSGTYPE_ERROR) g_errors++;
    std::printf("%s:%d:%d: %s: %s\n", msg->section, msg->row, msg->col, kind, msg->message);
}

// The engine needs a string factory to compile string literals. A compile-only engine never
// reads the constants, but a null one is refused as a null pointer and the engine keeps them
// by address, so each gets its own (never read) allocation.
class NullStringFactory : public asIStringFactory {
public:
    std::vector<std::unique_ptr<char[]>> constants;
    const void *GetStringConstant(const char *, asUINT) override
    {
        constants.emplace_back(new char[16]());
        return constants.back().get();
    }
    int ReleaseStringConstant(const void *) override { return 0; }
    int GetRawStringData(const void *, char *data, asUINT *length) const override
    {
        if (length) *length = 0;  // the engine asks while it builds; the text is not kept
        (void)data;
        return 0;
    }
};

int main(int argc, char **argv)
{
    std::vector<std::pair<int, long>> props;
    int i = 1;
    for (; i < argc && std::strcmp(argv[i], "--ep") == 0; i += 2) {
        if (i + 1 >= argc) return 2;
        const char *eq = std::strchr(argv[i + 1], '=');
        if (!eq) return 2;
        props.emplace_back(std::atoi(argv[i + 1]), std::atol(eq + 1));
    }
    if (argc - i < 2) {
        std::fprintf(stderr, "usage: as_check [--ep PROP=VALUE]... CONFIG SCRIPT...\n");
        return 2;
    }
    const char *configPath = argv[i++];

    asIScriptEngine *engine = asCreateScriptEngine();
    engine->SetMessageCallback(asFUNCTION(OnMessage), nullptr, asCALL_CDECL);
    for (auto &p : props) engine->SetEngineProperty(asEEngineProp(p.first), asPWORD(p.second));

    // One declaration per line, each fed to ConfigEngineFromStream on its own, so one refused
    // declaration is reported with its line and the rest still register. The engine keeps the
    // default namespace and access mask between calls, as the stream format expects.
    std::ifstream in(configPath);
    if (!in) { std::fprintf(stderr, "cannot read %s\n", configPath); return 2; }
    NullStringFactory factory;
    std::string line;
    int lineNo = 0, refused = 0, declared = 0;
    while (std::getline(in, line)) {
        lineNo++;
        size_t start = line.find_first_not_of(" \t\r");
        if (start == std::string::npos || line.compare(start, 2, "//") == 0) continue;
        if (line.size() >= 999) {
            std::printf("%s:%d: refused: line longer than the reader's 999 characters\n", configPath, lineNo);
            refused++;
            continue;
        }
        std::istringstream one(line);
        int before = g_errors;
        int r = ConfigEngineFromStream(engine, one, configPath, &factory);
        g_errors = before;  // config messages are counted as refusals, not build errors
        if (r < 0) {
            std::printf("%s:%d: refused: %s\n", configPath, lineNo, line.c_str());
            refused++;
        } else {
            declared++;
        }
    }
    std::printf("config: %d declarations registered, %d refused\n", declared, refused);

    CScriptBuilder builder;
    builder.StartNewModule(engine, "plugin");
    for (; i < argc; i++) {
        if (builder.AddSectionFromFile(argv[i]) < 0) {
            std::fprintf(stderr, "cannot read %s\n", argv[i]);
            return 2;
        }
    }
    int r = builder.BuildModule();
    std::printf("build: %s, %d errors\n", r >= 0 ? "ok" : "failed", g_errors);
    if (r >= 0) {
        // the plugin's global functions as the compiler declared them (namespaces in the types,
        // no parameter names): tests/angelscript/callbacks.py checks the host callbacks among them
        asIScriptModule *mod = engine->GetModule("plugin");
        for (asUINT f = 0; mod && f < mod->GetFunctionCount(); f++) {
            asIScriptFunction *fn = mod->GetFunctionByIndex(f);
            std::printf("function: %s\n", fn->GetDeclaration(true, true, false));
        }
    }
    engine->ShutDownAndRelease();
    if (r < 0 || g_errors) return 1;
    return refused ? 3 : 0;
}
