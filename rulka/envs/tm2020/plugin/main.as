// rulka telemetry for TrackMania 2020 (Openplanet).
//
// A TCP server on 127.0.0.1:<port> for one client (rulka's worker). While the player's car is in
// a race, one record per rendered frame:
//   "RLK2" | uint16 version=1 | uint16 field count | uint32 frame counter | float32 fields
// in the order of rulka/envs/tm2020/telemetry.py FIELDS. Nothing is written in menus or while
// loading. A client that hung up (checked every frame, in menus too) or a failed write drops
// the client and the plugin listens again.

[Setting name="Port" description="TCP port rulka connects to (environment.tm2020.plugin_port)"]
uint S_Port = 9010;

const uint16 RECORD_VERSION = 1;
const uint16 N_FIELDS = 37;

Net::Socket@ g_server = null;
Net::Socket@ g_client = null;
uint g_frame = 0;

void Listen() {
    @g_server = Net::Socket();
    if (!g_server.Listen("127.0.0.1", S_Port)) {
        error("rulka: cannot listen on 127.0.0.1:" + S_Port + " (port in use?)");
        @g_server = null;
        return;
    }
    print("rulka: waiting for incoming connection on 127.0.0.1:" + S_Port);
}

void DropClient(const string &in why) {
    if (g_client !is null) {
        g_client.Close();
        @g_client = null;
        print("rulka: client dropped (" + why + ")");
    }
}

bool InRace(CSmScriptPlayer@ &out api, CSceneVehicleVisState@ &out vis, CGameTerminal@ &out term) {
    auto app = cast<CTrackMania>(GetApp());
    if (app is null) return false;
    auto pg = cast<CSmArenaClient>(app.CurrentPlayground);
    if (pg is null || pg.Arena is null || pg.Arena.Players.Length == 0) return false;
    if (pg.GameTerminals.Length == 0) return false;
    @term = pg.GameTerminals[0];
    auto player = cast<CSmPlayer>(pg.Arena.Players[0]);
    if (player is null) return false;
    @api = cast<CSmScriptPlayer>(player.ScriptAPI);
    if (api is null) return false;
    @vis = VehicleState::ViewingPlayerState();
    return vis !is null;
}

void WriteVec(MemoryBuffer@ buf, const vec3 &in v) {
    buf.Write(v.x);
    buf.Write(v.y);
    buf.Write(v.z);
}

bool IsPaused() {
    auto app = cast<CTrackMania>(GetApp());
    auto net = app.Network;
    if (net is null || net.PlaygroundClientScriptAPI is null) return false;
    return net.PlaygroundClientScriptAPI.IsInGameMenuDisplayed;
}

void SendRecord(CSmScriptPlayer@ api, CSceneVehicleVisState@ vis, CGameTerminal@ term) {
    MemoryBuffer buf(0);
    buf.Write(uint8(0x52)); buf.Write(uint8(0x4C)); buf.Write(uint8(0x4B)); buf.Write(uint8(0x32));  // "RLK2"
    buf.Write(RECORD_VERSION);
    buf.Write(N_FIELDS);
    buf.Write(g_frame);
    g_frame++;
    buf.Write(float(api.CurrentRaceTime));
    buf.Write(vis.FrontSpeed);
    WriteVec(buf, vis.Position);
    WriteVec(buf, vis.WorldVel);
    WriteVec(buf, vis.Dir);
    WriteVec(buf, vis.Up);
    WriteVec(buf, vis.Left);
    buf.Write(vis.InputSteer);
    buf.Write(vis.InputGasPedal);
    buf.Write(vis.InputIsBraking ? 1.0f : 0.0f);
    bool finished = term.UISequence_Current == SGamePlaygroundUIConfig::EUISequence::Finish;
    buf.Write(finished ? 1.0f : 0.0f);
    buf.Write(float(vis.CurGear));
    buf.Write(VehicleState::GetRPM(vis));
    buf.Write(float(int(vis.FLGroundContactMaterial)));
    buf.Write(float(int(vis.FRGroundContactMaterial)));
    buf.Write(float(int(vis.RLGroundContactMaterial)));
    buf.Write(float(int(vis.RRGroundContactMaterial)));
    buf.Write(vis.FLSlipCoef);
    buf.Write(vis.FRSlipCoef);
    buf.Write(vis.RLSlipCoef);
    buf.Write(vis.RRSlipCoef);
    buf.Write(vis.FLDamperLen);
    buf.Write(vis.FRDamperLen);
    buf.Write(vis.RLDamperLen);
    buf.Write(vis.RRDamperLen);
    buf.Write(IsPaused() ? 1.0f : 0.0f);
    buf.Write(api.Distance);
    buf.Seek(0, 0);
    // One write per record, so a reader never sees a half-written record from a frame.
    if (!g_client.Write(buf)) {
        DropClient("write failed");
    }
}

void Main() {
    Listen();
    while (true) {
        if (g_server is null) {
            sleep(1000);
            Listen();
            continue;
        }
        if (g_client is null) {
            // Accept only once a connection is pending, so the frame loop never blocks on it.
            Net::Socket@ accepted = g_server.CanRead() ? g_server.Accept() : null;
            if (accepted !is null) {
                @g_client = accepted;
                print("rulka: client connected");
            }
        } else if (g_client.IsHungUp()) {
            // checked every frame, menus included: a write only fails in a race, and CanWrite()
            // does not notice a closed peer (Openplanet's Net::Socket::IsHungUp, OpenplanetCore.json)
            DropClient("client hung up");
        } else {
            CSmScriptPlayer@ api;
            CSceneVehicleVisState@ vis;
            CGameTerminal@ term;
            if (InRace(api, vis, term) && g_client.CanWrite()) {
                SendRecord(api, vis, term);
            }
        }
        yield();
    }
}

void OnDestroyed() {
    DropClient("plugin unloaded");
    if (g_server !is null) g_server.Close();
}
