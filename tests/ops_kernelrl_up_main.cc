// `kernelrl up` as its own binary for the operations tests, until they can run
// the tools/cli dispatcher's `kernelrl up` (same UpMain).
#include "tools/cli/up_cmd.h"

int main(int argc, char** argv) { return kernelrl::up::UpMain(argc, argv); }
