// rulka's TMInterface 2 plugin: a local TCP server speaking rulka's TMNF protocol.
//
// Installed by `rulka tm install-plugin` into Documents/TMInterface/Plugins. The game is started
// with /configstring="set custom_port <port>" (one port per game instance); the plugin listens on
// 127.0.0.1:<port> and serves one client at a time (a new connection replaces the old one).
//
// Protocol (rulka/envs/tmnf/protocol.py is the Python side; docs/tmnf.md describes it): every
// message is a little-endian int32 id followed by its fields. Messages the game sends (ids 1-5)
// are sent from inside a game callback, which then executes the client's commands in order until
// the client echoes the same id, the client sends SHUTDOWN, or the total wait exceeds the
// response timeout (then the client is dropped, the timeout goes back to 2000 ms and any frame
// request is cleared). Commands sent while no callback runs stay in the socket until the next one.

const string PLUGIN_VERSION = "1.1.0";  // 1.1.0: C_GET_API_STATE (the doctor's)
const int DEFAULT_TIMEOUT_MS = 2000;

enum MessageType {
    SC_RUN_STEP_SYNC = 1,
    SC_CHECKPOINT_COUNT_CHANGED_SYNC,
    SC_LAP_COUNT_CHANGED_SYNC,
    SC_REQUESTED_FRAME_SYNC,
    SC_ON_CONNECT_SYNC,
    C_SET_SPEED,
    C_REWIND_TO_STATE,
    C_REWIND_TO_CURRENT_STATE,
    C_GET_SIMULATION_STATE,
    C_SET_INPUT_STATE,
    C_GIVE_UP,
    C_PREVENT_SIMULATION_FINISH,
    C_SHUTDOWN,
    C_EXECUTE_COMMAND,
    C_SET_TIMEOUT,
    C_RACE_FINISHED,
    C_REQUEST_FRAME,
    C_RESET_CAMERA,
    C_SET_ON_STEP_PERIOD,
    C_UNREQUEST_FRAME,
    C_TOGGLE_INTERFACE,
    C_IS_IN_MENUS,
    C_GET_INPUTS,
    C_GET_API_STATE
}

Net::Socket@ g_listener = null;
Net::Socket@ g_client = null;
int g_timeoutMs = DEFAULT_TIMEOUT_MS;
int g_stepPeriodMs = 10;
bool g_connectPending = false;
int g_frameW = -1;
int g_frameH = -1;
bool g_frameRequested = false;

void Main()
{
    RegisterVariable("custom_port", 0);
    RegisterCustomCommand("rulka_listen", "start rulka's plugin server on custom_port", OnListenCommand);
    // queued after the /configstring commands, so custom_port is set when it runs
    CommandList startup;
    startup.Content = "rulka_listen";
    startup.Process();  // default QueueAndExecute, as Linesight's Python_Link.as calls it
}

void OnListenCommand(int fromTime, int toTime, const string&in commandLine, const array<string>&in args)
{
    uint16 port = uint16(GetVariableDouble("custom_port"));
    if (port == 0) {
        log("rulka: custom_port is 0; start the game with /configstring=\"set custom_port N\"", Severity::Error);
        return;
    }
    @g_listener = Net::Socket();
    if (!g_listener.Listen("127.0.0.1", port)) {
        log("rulka: cannot listen on 127.0.0.1:" + port, Severity::Error);
        @g_listener = null;
        return;
    }
    log("rulka: plugin " + PLUGIN_VERSION + " listening on 127.0.0.1:" + port);
}

void DropClient(const string&in why)
{
    if (g_client !is null) log("rulka: client dropped (" + why + ")");
    @g_client = null;
    g_timeoutMs = DEFAULT_TIMEOUT_MS;
    g_frameRequested = false;
}

// Execute commands until the client echoes `expected` (true), or the client is gone (false).
bool WaitForResponse(int expected)
{
    uint64 start = Time::Now;
    while (g_client !is null) {
        if (g_client.Available == 0) {
            if (Time::Now - start > uint64(g_timeoutMs)) {
                log("rulka: Client disconnected due to timeout (" + g_timeoutMs + " ms)", Severity::Warning);
                DropClient("timeout");
                return false;
            }
            continue;
        }
        int id = g_client.ReadInt32();
        if (id == expected) return true;
        if (id == MessageType::C_SHUTDOWN) { DropClient("shutdown"); return false; }
        HandleCommand(id);
    }
    return false;
}

void SendAndWait(int id)
{
    WaitForResponse(id);
}

void WriteVec3(const vec3&in v)
{
    g_client.Write(v.x);
    g_client.Write(v.y);
    g_client.Write(v.z);
}

void WriteWheel(TM::SceneVehicleCar::SimulationWheel@ wheel)
{
    g_client.Write(wheel.RTState.HasGroundContact ? 1 : 0);
    g_client.Write(wheel.RTState.DamperAbsorbVal);
    g_client.Write(int(wheel.RTState.ContactMaterialId));
}

void HandleCommand(int id)
{
    SimulationManager@ sim = GetSimulationManager();
    switch (id) {
        case MessageType::C_SET_SPEED: {
            float speed = g_client.ReadFloat();
            sim.SetSpeed(speed);
            break;
        }
        case MessageType::C_REWIND_TO_STATE: {
            int n = g_client.ReadInt32();
            array<uint8> data = g_client.ReadBytes(n);
            if (sim.InRace) {
                SimulationState state(data);
                sim.RewindToState(state);
            }
            break;
        }
        case MessageType::C_REWIND_TO_CURRENT_STATE:
            if (sim.InRace) sim.RewindToState(sim.SaveState());
            break;
        case MessageType::C_GET_SIMULATION_STATE: {
            array<uint8> data = sim.SaveState().ToArray();
            g_client.Write(int(data.Length));
            g_client.Write(data);
            break;
        }
        case MessageType::C_SET_INPUT_STATE: {
            uint8 left = g_client.ReadUint8();
            uint8 right = g_client.ReadUint8();
            uint8 up = g_client.ReadUint8();
            uint8 down = g_client.ReadUint8();
            if (sim.InRace) {
                sim.SetInputState(InputType::Left, left);
                sim.SetInputState(InputType::Right, right);
                sim.SetInputState(InputType::Up, up);
                sim.SetInputState(InputType::Down, down);
            }
            break;
        }
        case MessageType::C_GIVE_UP:
            if (sim.InRace) sim.GiveUp();
            break;
        case MessageType::C_PREVENT_SIMULATION_FINISH:
            if (sim.InRace) sim.PreventSimulationFinish();
            break;
        case MessageType::C_EXECUTE_COMMAND: {
            int n = g_client.ReadInt32();
            ExecuteCommand(g_client.ReadString(uint(n)));
            break;
        }
        case MessageType::C_SET_TIMEOUT:
            g_timeoutMs = int(g_client.ReadUint32());
            break;
        case MessageType::C_RACE_FINISHED: {
            bool done = sim.PlayerInfo.RaceFinished || sim.TickTime > sim.RaceTime;
            g_client.Write(done ? 1 : 0);
            break;
        }
        case MessageType::C_REQUEST_FRAME:
            g_frameW = g_client.ReadInt32();
            g_frameH = g_client.ReadInt32();
            g_frameRequested = true;
            break;
        case MessageType::C_RESET_CAMERA:
            sim.ResetCamera();
            break;
        case MessageType::C_SET_ON_STEP_PERIOD:
            g_stepPeriodMs = g_client.ReadInt32();
            if (g_stepPeriodMs < 10) g_stepPeriodMs = 10;
            break;
        case MessageType::C_UNREQUEST_FRAME:
            g_frameRequested = false;
            break;
        case MessageType::C_TOGGLE_INTERFACE:
            ToggleRaceInterface(g_client.ReadInt32() != 0);
            break;
        case MessageType::C_IS_IN_MENUS:
            g_client.Write(GetCurrentGameState() == TM::GameState::Menus ? 1 : 0);
            break;
        case MessageType::C_GET_INPUTS: {
            string text = sim.InputEvents.ToCommandsText();
            g_client.Write(int(text.Length));
            g_client.Write(text);
            break;
        }
        case MessageType::C_GET_API_STATE:
            // `rulka tm doctor` only: what TMInterface's API reports for this step, which the
            // doctor compares with the state blob's fields at their offsets (Linesight never sends it)
            g_client.Write(int(sim.RaceTime));
            WriteVec3(sim.Dyna.CurrentState.Location.Position);
            WriteVec3(sim.Dyna.CurrentState.LinearSpeed);
            WriteVec3(sim.Dyna.CurrentState.AngularSpeed);
            WriteWheel(sim.Wheels.FrontLeft);
            WriteWheel(sim.Wheels.FrontRight);
            WriteWheel(sim.Wheels.BackRight);
            WriteWheel(sim.Wheels.BackLeft);
            break;
        default:
            log("rulka: unknown message id " + id + " (client and plugin versions differ?)", Severity::Warning);
            break;
    }
}

void Render()
{
    if (g_listener is null) return;
    Net::Socket@ incoming = g_listener.Accept(0);
    if (incoming !is null) {
        @g_client = incoming;
        g_client.NoDelay = true;
        g_timeoutMs = DEFAULT_TIMEOUT_MS;
        g_frameRequested = false;
        log("rulka: client connected");
        if (GetCurrentGameState() == TM::GameState::StartUp) {
            g_connectPending = true;
        } else {
            g_client.Write(int(MessageType::SC_ON_CONNECT_SYNC));
            SendAndWait(MessageType::SC_ON_CONNECT_SYNC);
        }
    }
    if (g_client !is null && g_frameRequested) {
        // CaptureScreenshot takes the size inout: it comes back as the size actually captured
        // (smaller when the window is), which goes out first so the client can check it.
        vec2 size(g_frameW, g_frameH);
        array<uint8>@ pixels = Graphics::CaptureScreenshot(size);
        g_frameRequested = false;
        g_client.Write(int(MessageType::SC_REQUESTED_FRAME_SYNC));
        g_client.Write(int(size.x));
        g_client.Write(int(size.y));
        g_client.Write(pixels);
        SendAndWait(MessageType::SC_REQUESTED_FRAME_SYNC);
    }
}

void OnGameStateChanged(TM::GameState state)
{
    if (g_connectPending && g_client !is null && state == TM::GameState::Menus) {
        g_connectPending = false;
        g_client.Write(int(MessageType::SC_ON_CONNECT_SYNC));
        SendAndWait(MessageType::SC_ON_CONNECT_SYNC);
    }
}

void OnRunStep(SimulationManager@ sim)
{
    if (g_client is null) return;
    int raceTime = sim.RaceTime;
    if (raceTime % g_stepPeriodMs == 0 || sim.TickTime > raceTime) {
        g_client.Write(int(MessageType::SC_RUN_STEP_SYNC));
        g_client.Write(raceTime);
        SendAndWait(MessageType::SC_RUN_STEP_SYNC);
    }
}

void OnCheckpointCountChanged(SimulationManager@ sim, int current, int target)
{
    if (g_client is null) return;
    g_client.Write(int(MessageType::SC_CHECKPOINT_COUNT_CHANGED_SYNC));
    g_client.Write(current);
    g_client.Write(target);
    SendAndWait(MessageType::SC_CHECKPOINT_COUNT_CHANGED_SYNC);
}

void OnLapCountChanged(SimulationManager@ sim, int current, int target)
{
    if (g_client is null) return;
    g_client.Write(int(MessageType::SC_LAP_COUNT_CHANGED_SYNC));
    g_client.Write(current);
    g_client.Write(target);
    SendAndWait(MessageType::SC_LAP_COUNT_CHANGED_SYNC);
}

PluginInfo@ GetPluginInfo()
{
    PluginInfo info;
    info.Author = "rulka";
    info.Name = "rulka link";
    info.Description = "Lets rulka (distributed RL for TrackMania) drive the game over a local socket";
    info.Version = PLUGIN_VERSION;
    return info;
}
